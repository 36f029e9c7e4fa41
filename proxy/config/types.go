package config

import (
	"time"
)

// Config is a whole tether configuration file. The ReverseProxy section has
// YARP's shape, so a YARP appsettings.json section loads as it is. After Load
// every default documented on a field has been filled in, so consumers read
// effective values and never re-apply defaults.
type Config struct {
	// Listeners are the proxy's listening sockets. When absent, Urls is used;
	// when both are absent the default is one HTTP listener on ":8080".
	Listeners []Listener
	// Urls is ASP.NET's semicolon-separated list of listen URLs
	// ("http://*:8080;https://+:8443"), honoured only when Listeners is absent.
	// After Load it has been turned into Listeners.
	Urls string
	// TrustedProxies lists addresses or CIDRs of proxies in front of tether.
	// Only when the immediate peer is in this list are the incoming
	// X-Forwarded-For (appended to), X-Forwarded-Proto and X-Forwarded-Host kept.
	TrustedProxies []string
	// Limits bound what a client may send. Defaults below.
	Limits Limits
	// ReverseProxy is YARP's section: routes and clusters.
	ReverseProxy ReverseProxy
	// DataProtection reads a YARP fleet's key ring (dataprotection.go).
	DataProtection *DataProtection
	// Waf is the web application firewall (waf.go). Default off.
	Waf Waf

	// ASP.NET's boilerplate, in every appsettings.json: both load without
	// a warning. Logging sets the .NET application's log categories
	// (tether's own logs follow --log-level). AllowedHosts "*" allows every
	// host, which tether does; naming hosts is a warning, since tether does
	// not filter by Host (a route's Match.Hosts does).
	Logging      AppSection
	AllowedHosts string
	// Kestrel is ASP.NET Kestrel's section: Endpoints become listeners,
	// Limits fill Limits (kestrel.go).
	Kestrel Kestrel
}

// Listener is one listening address.
type Listener struct {
	// Address is "host:port" or ":port". Required.
	Address string
	// Certificate, when set, makes this an HTTPS listener (HTTP/2 via ALPN).
	Certificate *Certificate
	// Acme, when set, makes this an HTTPS listener whose certificate the
	// cluster obtains from an ACME directory (acme.go); not with Certificate.
	Acme *Acme
	// Redirect, when set, answers every request on this listener with a
	// redirect instead of proxying it (e.g. HTTP to HTTPS).
	Redirect        *Redirect
	ListenerOptions // Kestrel's endpoint settings (kestrel.go)
}

// Certificate names a certificate as Kestrel's Certificates section does:
// PEM files (Path and KeyPath) or a PKCS#12 file (Path, optional Password).
type Certificate struct {
	Path    string // certificate chain (PEM), or PKCS#12 when KeyPath is empty. Required.
	KeyPath string // private key (PEM).
	// Password opens a PKCS#12 file.
	Password string
	// Subject, Store, Location and AllowInvalid name a certificate store
	// entry (Windows): refused, tether reads files only.
	Subject, Store, Location string
	AllowInvalid             bool
}

// Redirect is an Application Gateway style redirect rule. Fields left empty
// keep the request's own value.
type Redirect struct {
	Scheme string // "http" or "https"; default: unchanged
	Host   string // host name without port; default: the request's host
	Port   int    // default: the scheme's default port when Scheme changes, else unchanged
	// StatusCode is 301, 302, 303, 307 or 308. Default 308.
	StatusCode int
	// IncludePath and IncludeQueryString default to true.
	IncludePath        *bool
	IncludeQueryString *bool
}

// Limits are per-connection limits of the listeners (Kestrel's names).
type Limits struct {
	// MaxRequestHeadersTotalSize in bytes; larger header blocks get 431.
	// Default 32768.
	MaxRequestHeadersTotalSize int
	// RequestHeadersTimeout bounds how long a client may take to send the
	// request headers. Default 30s; an explicit zero is an error.
	RequestHeadersTimeout Duration
	// KeepAliveTimeout closes idle client connections. Default 2m10s; an
	// explicit zero is an error.
	KeepAliveTimeout Duration
	// ShutdownTimeout bounds how long in-flight requests may run after a
	// stop signal. Default 30s. 0: stop at once without waiting for
	// in-flight requests.
	ShutdownTimeout Duration
	// MaxRequestBodySize in bytes applies to routes that set none; larger
	// bodies get 413. 0: no limit (tether's default; Kestrel's is 30 MB).
	MaxRequestBodySize int64
	// MaxConcurrentConnections caps open client connections over all
	// listeners; further ones are closed at once. 0: no cap.
	MaxConcurrentConnections int
	// MinRequestBodyDataRate is the slowest a client may send a request
	// body once its grace period has passed, counted over the time spent
	// waiting for the body's bytes; a slower body is answered 408 (or its
	// connection, its stream in HTTP/2, is cut when the response has
	// started). Default 240 bytes/s after 5 s; null: no minimum. gRPC
	// requests over HTTP/2 and HTTP/3 (streams) and upgraded connections are exempt.
	MinRequestBodyDataRate MinDataRate
	// MinResponseDataRate is the slowest a client may take the response:
	// each write must complete within the larger of the grace period and
	// its size at this rate (writes queued behind one another add up),
	// else the connection (the stream in HTTP/2) is cut. Default 240
	// bytes/s with 5 s; null: no minimum.
	MinResponseDataRate MinDataRate
}

// MinDataRate is Kestrel's MinDataRate, written
// {"BytesPerSecond": 240, "GracePeriod": "00:00:05"}; null disables the
// limit. BytesPerSecond must not be negative (0: no minimum), GracePeriod
// must be more than one second (Kestrel's heartbeat) and defaults to 5 s.
type MinDataRate struct {
	BytesPerSecond float64
	GracePeriod    Duration
	// Set is true when the key was given in the file (null included);
	// Disabled when it was given as null.
	Set      bool
	Disabled bool
}

// Kestrel's MinDataRate defaults.
const (
	DefaultMinDataRate      = 240.0
	DefaultMinDataRateGrace = 5 * time.Second
)

// Effective returns the rate in force: the defaults for a value neither
// given nor filled in by Load (a config built in code); on is false when
// the limit is off (null, or 0 bytes per second).
func (r MinDataRate) Effective() (bytesPerSecond float64, grace time.Duration, on bool) {
	switch {
	case r.Disabled:
		return 0, 0, false
	case !r.Set && r.BytesPerSecond == 0 && r.GracePeriod.Duration == 0:
		return DefaultMinDataRate, DefaultMinDataRateGrace, true
	}
	grace = r.GracePeriod.Duration
	if !r.GracePeriod.Set && grace == 0 {
		grace = DefaultMinDataRateGrace
	}
	return r.BytesPerSecond, grace, r.BytesPerSecond > 0
}

// ReverseProxy is YARP's configuration section.
type ReverseProxy struct {
	Routes   map[string]*Route
	Clusters map[string]*Cluster
}

// Route matches requests and sends them to a cluster.
type Route struct {
	// RouteId is filled from the map key by Load.
	RouteId string
	// ClusterId names the cluster to send to. Required.
	ClusterId string
	// Order ranks routes before specificity, as in ASP.NET: lower wins.
	// Default 0.
	Order int
	Match RouteMatch
	// Transforms are YARP's transform dictionaries, applied in order.
	Transforms []map[string]string
	// MaxRequestBodySize in bytes; larger bodies get 413. 0: the global
	// Limits.MaxRequestBodySize (none by default); -1: no limit.
	MaxRequestBodySize int64
	// SessionAffinity overrides the cluster's affinity for this route
	// (Envoy's StatefulSessionPerRoute): {"Enabled": false} disables it, a
	// full block replaces it. Nil: the cluster's applies.
	SessionAffinity *SessionAffinity
	// WafPolicy overrides the top-level Waf's mode for this route (waf.go).
	WafPolicy *WafPolicy
	Metadata  map[string]string

	// AuthorizationPolicy may only be "Anonymous" (or absent): tether does
	// not authenticate, so a route YARP protected is refused, not opened.
	AuthorizationPolicy string
	// CorsPolicy may only be "Disable" (or absent), for the same reason.
	CorsPolicy        string
	RateLimiterPolicy Unsupported
	OutputCachePolicy Unsupported
	// Timeout bounds the whole exchange, as ASP.NET's request timeouts do:
	// 504 before the response starts, the connection cut after. It stops
	// once a WebSocket or other upgrade is accepted. Absent: none.
	Timeout Duration
	// TimeoutPolicy may only be "Disable" (no timeout, the default); named
	// policies live in ASP.NET code. Not together with Timeout.
	TimeoutPolicy string
}

// RouteMatch holds the match criteria; all given criteria must hold.
type RouteMatch struct {
	// Path is a YARP route template ("/api/{id}", "/{**catch-all}") or, when
	// it ends in "/*" or is written as "prefix:/a", a plain prefix. Empty
	// matches every path.
	Path string
	// Hosts match the request host exactly (case-insensitive) or with a
	// leading "*." wildcard; an optional ":port" must match too.
	Hosts []string
	// Methods match case-insensitively.
	Methods         []string
	Headers         []RouteHeader
	QueryParameters []RouteQueryParameter
}

// RouteHeader is YARP's header match.
type RouteHeader struct {
	Name   string
	Values []string
	// Mode: ExactHeader (default), HeaderPrefix, Contains, NotContains,
	// Exists, NotExists.
	Mode            string
	IsCaseSensitive bool
}

// RouteQueryParameter is YARP's query parameter match.
type RouteQueryParameter struct {
	Name   string
	Values []string
	// Mode: Exact (default), Contains, NotContains, Prefix, Exists.
	Mode            string
	IsCaseSensitive bool
}

// Cluster is a group of destinations with shared policies.
type Cluster struct {
	// ClusterId is filled from the map key by Load.
	ClusterId string
	// LoadBalancingPolicy: PowerOfTwoChoices (default), RoundRobin,
	// LeastRequests, Random, FirstAlphabetical.
	LoadBalancingPolicy string
	SessionAffinity     SessionAffinity
	HealthCheck         HealthCheck
	HttpClient          HttpClient
	HttpRequest         HttpRequest
	Destinations        map[string]*Destination
	Metadata            map[string]string
	// DrainTimeout is how long a draining destination keeps serving its
	// existing affinitized sessions (Application Gateway's connection
	// draining timeout). Default 5m. 0 drains at once: existing sessions
	// move on the next request.
	DrainTimeout Duration
}

// Destination is one backend.
type Destination struct {
	// DestinationId is filled from the map key by Load.
	DestinationId string
	// Address is the backend's base URL (http or https, IP or DNS name). Required.
	Address string
	// Health is an optional different base URL for active probes.
	Health string
	// Host overrides the Host header sent to this destination.
	Host string
	// Metadata; "AffinityKey" groups destinations under one affinity key.
	Metadata map[string]string
}

// SessionAffinity is YARP's affinity block plus tether's additions.
type SessionAffinity struct {
	Enabled bool
	// Policy: HashCookie (default), ArrCookie, Cookie, CustomHeader,
	// EnvelopeCookie, EnvelopeHeader.
	Policy string
	// FailurePolicy: Redistribute (default), Return503Error.
	FailurePolicy string
	// AffinityKeyName is the cookie or header name. Required when Enabled.
	AffinityKeyName string
	Cookie          SessionAffinityCookie
	// FailureStatusCode is answered by Return503Error. Default 503.
	FailureStatusCode int
}

// SessionAffinityCookie is YARP's cookie builder settings.
type SessionAffinityCookie struct {
	Domain string
	// Path default "/".
	Path string
	// Expiration sets Expires relative to the response time; zero (given or
	// not): no Expires, a session cookie.
	Expiration Duration
	// MaxAge sets Max-Age; zero (given or not): not sent.
	MaxAge Duration
	// HttpOnly default true.
	HttpOnly *bool
	// IsEssential is accepted for YARP compatibility (consent is not enforced).
	IsEssential bool
	// SameSite: Unspecified (default), None, Lax, Strict.
	SameSite string
	// SecurePolicy: SameAsRequest (default), Always, None.
	SecurePolicy string
}

// HealthCheck is YARP's health check block.
type HealthCheck struct {
	Active  ActiveHealthCheck
	Passive PassiveHealthCheck

	AvailableDestinationsPolicy Unsupported
}

// ActiveHealthCheck configures probes.
type ActiveHealthCheck struct {
	Enabled bool
	// Interval between probes of one destination. Default 15s; an explicit
	// zero is an error.
	Interval Duration
	// Timeout of one probe. Default 10s; an explicit zero is an error.
	Timeout Duration
	// Policy: ConsecutiveFailures (default, the only one).
	Policy string
	// Path is appended to the destination's health (or main) address. Default "/".
	Path string
	// Query is appended to the probe URL (e.g. "?ready=1").
	Query string
	// HealthyStatuses is a list of codes and ranges, e.g. "200-399" (default)
	// or "200,204".
	HealthyStatuses string
	// ConsecutiveFailures marks a destination unhealthy. Default 3, or the
	// cluster metadata "ConsecutiveFailuresHealthPolicy.Threshold" (YARP).
	ConsecutiveFailures int
	// ConsecutiveSuccesses mark an unhealthy destination healthy again. Default 1.
	ConsecutiveSuccesses int
	// ProbeFanout is how many nodes probe each destination. Default 3.
	ProbeFanout int
}

// PassiveHealthCheck configures health from proxied traffic.
type PassiveHealthCheck struct {
	Enabled bool
	// Policy: TransportFailureRate (default, the only one).
	Policy string
	// ReactivationPeriod is how long a failed destination stays excluded
	// locally. Default 2m (YARP's); an explicit zero is an error.
	ReactivationPeriod Duration
}

// HttpClient configures the cluster's shared transport.
type HttpClient struct {
	DangerousAcceptAnyServerCertificate bool
	// MaxConnectionsPerServer caps connections per destination; 0: no cap.
	MaxConnectionsPerServer int
	// EnableMultipleHttp2Connections is accepted; Go's transport already
	// opens more HTTP/2 connections as needed.
	EnableMultipleHttp2Connections bool
	// ClientCertificate and CertificateAuthority are tether's backend TLS
	// trust settings (backendtls.go).
	ClientCertificate    ClientCertificate
	CertificateAuthority CertificateAuthority

	// SslProtocols bound the TLS versions offered to destinations
	// (["Tls12", "Tls13"]); default TLS 1.2 and 1.3.
	SslProtocols           TLSVersions
	RequestHeaderEncoding  Unsupported
	ResponseHeaderEncoding Unsupported
	WebProxy               Unsupported
}

// HttpRequest configures outgoing requests.
type HttpRequest struct {
	// ActivityTimeout (YARP's name; Timeout is read as a synonym) bounds
	// waiting for the backend's response headers. Default 100s; an explicit
	// zero in either is an error. After Load, ActivityTimeout holds the
	// effective value (Timeout's when only Timeout was given).
	ActivityTimeout Duration
	Timeout         Duration

	// Version ("1.1", "2", default "2") and VersionPolicy
	// (RequestVersionOrLower default, RequestVersionExact,
	// RequestVersionOrHigher) choose the HTTP version to destinations as
	// .NET's HttpClient does: h2 over TLS by ALPN; h2c with prior knowledge
	// for http:// only with version 2 and an Exact or OrHigher policy.
	// After Load both are canonical ("1.1", "2.0"; the policy names).
	Version                string
	VersionPolicy          string
	AllowResponseBuffering Unsupported
}

// Duration reads .NET TimeSpan strings ("03:00:00", "1.00:00:00",
// "00:00:00.5") and Go durations ("3h", "500ms"). A bare integer is a number
// of DAYS, as .NET's TimeSpan reads it ("5" is 5 days), and Load warns about
// it; a bare decimal ("1.5") is an error. Null or an empty string is the
// same as leaving the key out.
type Duration struct {
	time.Duration
	// Set is true when the key was given in the file (even as zero), so an
	// explicit zero can be told from an absent key. Defaults filled in by
	// Load leave it false.
	Set bool
}

// AppSection marks a section ASP.NET defines for the application itself
// (Logging), with no meaning for tether: it loads silently.
type AppSection struct {
	// Set is true when the key was present in the file.
	Set bool
}

// Unsupported marks a key that YARP or ASP.NET defines and tether accepts
// without implementing it; Load warns once per occurrence, naming its path.
type Unsupported struct {
	// Set is true when the key was present in the file.
	Set bool
}
