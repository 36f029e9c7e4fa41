package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/proxy/affinity"
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/forwarded"
	"github.com/tether-proxy/tether/proxy/health"
	"github.com/tether-proxy/tether/proxy/internal/sockio"
	"github.com/tether-proxy/tether/proxy/lb"
	"github.com/tether-proxy/tether/proxy/lean"
	"github.com/tether-proxy/tether/proxy/route"
	"github.com/tether-proxy/tether/proxy/routetimeout"
	"github.com/tether-proxy/tether/proxy/transform"
	"github.com/tether-proxy/tether/proxy/upstream"
	"github.com/tether-proxy/tether/proxy/waf"
)

// Defaults applied when a config was built in code rather than by Load.
const (
	defaultActivityTimeout = 100 * time.Second
	defaultDrainTimeout    = 5 * time.Minute
	idleConnTimeout        = 90 * time.Second
	maxIdleConnsPerHost    = 256
)

// runtime is one immutable snapshot of the data path.
type runtime struct {
	table      *route.Table
	routes     map[*config.Route]*routeRT
	routesByID map[string]*routeRT
	clusters   map[string]*clusterRT
	clusterIDs []string
	trust      forwarded.Trust
	// noRoute counts requests that matched no route.
	noRoute     *destStats
	noRouteErrs [numKinds]prometheus.Counter
	waf         *waf.Firewall
	// reqRate and respRate are Limits.MinRequestBodyDataRate and
	// MinResponseDataRate (rate.go).
	reqRate, respRate dataRate
}

// routeRT is a route's compiled state.
type routeRT struct {
	id      string
	cluster *clusterRT
	// aff is the route's override provider when it has one, else the
	// cluster's; nil when affinity is disabled for this route.
	aff     *affinity.Provider
	tf      *transform.Transforms
	fwd     *forwarded.Transforms // X-Forwarded and Forwarded; nil: the defaults
	maxBody int64
	timeout time.Duration // Route.Timeout; 0: none
	stats   map[*upstream.Destination]*destStats
	// none counts requests on this route that reached no destination.
	none *destStats
	// waf is nil when the WAF is off for this route.
	waf *waf.Policy
	// underscore counts the fields dropped for their underscore
	// spelling; nil counts nothing.
	underscore forwarded.Drops
}

// clusterRT is a cluster's runtime state.
type clusterRT struct {
	id        string
	up        *upstream.Cluster
	lb        lb.Policy
	aff       *affinity.Provider
	transport *http.Transport
	// lean is the HTTP/1.1 path in front of transport (package lean); nil
	// when the cluster's settings leave it nothing to take.
	lean         *lean.Transport
	rp           *httputil.ReverseProxy
	passive      *health.Passive
	active       *health.Active
	drainTimeout time.Duration
	// activity is HttpRequest.ActivityTimeout: the idle bound on the
	// client's upload and on the backend's response.
	activity time.Duration
	// clientCfg is what the transport was built from; a reload that keeps
	// it keeps the transport.
	clientCfg transportConfig
	// tls and sni are the backend TLS settings (backendtls.go).
	tls      *upstream.BackendTLS
	sni      map[string]string
	affCount [4]prometheus.Counter
	errCount [numKinds]prometheus.Counter
}

// transportConfig is the part of a cluster's config its transport is built
// from.
type transportConfig struct {
	client   config.HttpClient
	activity time.Duration
	// tlsFiles and sni change when the TLS files' contents or a
	// destination's server name do.
	tlsFiles, sni string
	proto         upstream.Protocol // HttpRequest.Version, VersionPolicy, SslProtocols
}

// start begins the snapshot's active health checks.
func (rt *runtime) start() {
	for _, id := range rt.clusterIDs {
		if a := rt.clusters[id].active; a != nil {
			a.Start()
		}
	}
}

// stop ends the snapshot's health checks and closes the idle backend
// connections of the transports next does not reuse; requests still running
// on them finish. next is nil when the proxy closes.
func (rt *runtime) stop(next *runtime) {
	rt.stopWaf(next)
	for _, id := range rt.clusterIDs {
		cl := rt.clusters[id]
		if cl.active != nil {
			cl.active.Stop()
		}
		if cl.transport == nil {
			continue
		}
		if next != nil {
			if ncl := next.clusters[id]; ncl != nil && ncl.transport == cl.transport {
				continue
			}
		}
		if cl.lean != nil {
			cl.lean.CloseIdleConnections() // the transport's too
			continue
		}
		cl.transport.CloseIdleConnections()
	}
}

// match finds the route for r.
func (rt *runtime) match(r *http.Request) *routeRT {
	cr := rt.table.Match(r)
	if cr == nil {
		return nil
	}
	if rr := rt.routes[cr]; rr != nil {
		return rr
	}
	return rt.routesByID[cr.RouteId]
}

// compileKeyring lets Compile build affinity providers without the cluster
// keyring; it is never asked to seal or open anything.
type compileKeyring struct{}

var errCompileOnly = errors.New("keyring not available while compiling")

func (compileKeyring) Seal(purpose, plaintext []byte) (string, error) { return "", errCompileOnly }
func (compileKeyring) Open(purpose []byte, value string) ([]byte, error) {
	return nil, errCompileOnly
}

// build compiles cfg into a runtime. With p nil it only checks (Compile):
// no transports, health checkers or metrics. old, when set, donates
// destinations whose configuration is unchanged.
func build(cfg *config.Config, p *Proxy, old *runtime) (*runtime, config.Errors) {
	var errs config.Errors
	fail := func(path, format string, args ...any) {
		errs = append(errs, config.FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	rt := &runtime{
		routes:     map[*config.Route]*routeRT{},
		routesByID: map[string]*routeRT{},
		clusters:   map[string]*clusterRT{},
	}
	var bad map[int]string
	rt.reqRate = newDataRate(cfg.Limits.MinRequestBodyDataRate)
	rt.respRate = newDataRate(cfg.Limits.MinResponseDataRate)
	rt.trust, bad = forwarded.ParseTrusted(cfg.TrustedProxies)
	for i, s := range bad {
		fail(fmt.Sprintf("TrustedProxies[%d]", i), "%q is not an IP address or CIDR", s)
	}
	table, terrs := route.NewTable(cfg.ReverseProxy.Routes)
	errs = append(errs, terrs...)
	rt.table = table
	var werrs config.Errors
	rt.waf, werrs = buildWaf(cfg, p, old)
	errs = append(errs, werrs...)

	affOpts := affinity.Options{Keyring: compileKeyring{}}
	if p != nil {
		affOpts.Now = p.now
		if p.opts.Keyring != nil {
			affOpts.Keyring = p.opts.Keyring
		}
	}
	var yarp affinity.Yarp
	var yerrs config.Errors
	if p != nil {
		yarp, yerrs = affinity.OpenYarp(cfg, &p.dp, p.now, p.logger)
	} else {
		yarp, yerrs = affinity.OpenYarp(cfg, nil, nil, nil)
	}
	errs = append(errs, yerrs...)
	affOpts.Yarp = yarp

	for _, id := range sortedKeys(cfg.ReverseProxy.Clusters) {
		c := cfg.ReverseProxy.Clusters[id]
		path := "ReverseProxy.Clusters." + id
		if c == nil {
			fail(path, "empty cluster")
			continue
		}
		// A given DrainTimeout of 0 means drain at once; only an absent one
		// (a config built in code) takes the default.
		cl := &clusterRT{id: id, drainTimeout: c.DrainTimeout.Duration}
		if !c.DrainTimeout.Set && cl.drainTimeout <= 0 {
			cl.drainTimeout = defaultDrainTimeout
		}
		var oldCl *clusterRT
		if old != nil {
			oldCl = old.clusters[id]
		}
		var dests []*upstream.Destination
		for _, did := range sortedKeys(c.Destinations) {
			d := c.Destinations[did]
			dpath := path + ".Destinations." + did
			if d == nil {
				fail(dpath, "empty destination")
				continue
			}
			addr, err := parseBackendURL(d.Address)
			if err != nil {
				fail(dpath+".Address", "%v", err)
				continue
			}
			var hAddr *url.URL
			if d.Health != "" {
				if hAddr, err = parseBackendURL(d.Health); err != nil {
					fail(dpath+".Health", "%v", err)
					continue
				}
			}
			dests = append(dests, destination(oldCl, did, addr, hAddr, d))
		}
		cl.up = upstream.NewCluster(id, dests)
		var terrs config.Errors
		cl.tls, cl.sni, terrs = upstream.CompileTLS(path, c, dests)
		errs = append(errs, terrs...)
		pol, err := lb.New(c.LoadBalancingPolicy)
		if err != nil {
			fail(path+".LoadBalancingPolicy", "%v", err)
		}
		cl.lb = pol
		cl.aff, err = affinity.New(id, c.SessionAffinity, cl.up, affOpts)
		if err != nil {
			errs = append(errs, affinityErrors(path, err)...)
		}
		rt.clusters[id] = cl
		rt.clusterIDs = append(rt.clusterIDs, id)
		if p != nil {
			p.wireCluster(cl, c, oldCl)
		}
	}

	for _, id := range sortedKeys(cfg.ReverseProxy.Routes) {
		r := cfg.ReverseProxy.Routes[id]
		path := "ReverseProxy.Routes." + id
		if r == nil {
			continue // the route table reports it
		}
		cl := rt.clusters[r.ClusterId]
		if cl == nil {
			fail(path+".ClusterId", "unknown cluster %q", r.ClusterId)
			continue
		}
		rr := &routeRT{id: id, cluster: cl, aff: cl.aff, maxBody: r.MaxRequestBodySize, timeout: routetimeout.Of(r), waf: rt.waf.Policy(cfg, r)}
		if r.SessionAffinity != nil {
			prov, err := affinity.New(cl.id, *r.SessionAffinity, cl.up, affOpts)
			if err != nil {
				errs = append(errs, affinityErrors(path, err)...)
			}
			rr.aff = prov
		}
		tf, terrs := transform.CompileRoute(path+".Transforms", r.Transforms, r.Match.Path)
		errs = append(errs, terrs...)
		rr.tf = tf
		rr.fwd, terrs = forwarded.Compile(path+".Transforms", r.Transforms)
		errs = append(errs, terrs...)
		if p != nil {
			rr.underscore = p.metrics.underscoreDrops
			rr.none = p.metrics.stats(id, cl.id, "")
			rr.stats = make(map[*upstream.Destination]*destStats, len(cl.up.Destinations))
			for _, d := range cl.up.Destinations {
				rr.stats[d] = p.metrics.stats(id, cl.id, d.ID)
			}
		}
		rt.routes[r] = rr
		rt.routesByID[id] = rr
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if p != nil {
		rt.noRoute = p.metrics.stats("", "", "")
		rt.noRouteErrs = p.metrics.errorCounters("")
	}
	return rt, nil
}

// Compile checks everything about cfg that building the data path needs
// (route templates, policies, affinity, transforms, destination addresses,
// TrustedProxies) without starting anything. Errors carry JSON paths. Used
// by `tether config validate` and before a reload.
func Compile(cfg *config.Config) config.Errors {
	_, errs := build(cfg, nil, nil)
	return errs
}

// Parse runs Compile on every config it decodes, also one with other
// errors, so that `tether config validate` and a reload list the data
// path's errors (route templates, transforms, affinity) together with the
// rest instead of only once the rest is fixed.
func init() {
	config.AddCheck(func(c *config.Config) config.Errors { return Compile(c) })
}

// destination returns the old cluster's destination when its configuration
// is unchanged, so its health, drain state and in-flight count carry over;
// otherwise a new one. A destination whose id survives but whose
// configuration changed keeps its drain state (drain is keyed by id in the
// cluster's store), and its health and passive exclusion too when only Host
// or Metadata changed.
func destination(oldCl *clusterRT, id string, addr, hAddr *url.URL, d *config.Destination) *upstream.Destination {
	nd := upstream.NewDestination(id, addr, hAddr, d.Host, d.Metadata)
	if oldCl == nil {
		return nd
	}
	od := oldCl.up.Destination(id)
	if od == nil {
		return nd
	}
	sameAddrs := od.Address.String() == nd.Address.String() && od.HealthAddress.String() == nd.HealthAddress.String()
	if sameAddrs && od.Host == nd.Host && maps.Equal(od.Metadata, nd.Metadata) {
		return od
	}
	if on, deadline := od.Draining(); on {
		nd.SetDraining(deadline)
	}
	if sameAddrs {
		nd.SetActiveHealth(od.ActiveHealth())
		nd.SetLocalHealth(od.LocalHealth())
		if u := od.PassiveUntil(); !u.IsZero() {
			nd.MarkPassiveFailure(u)
		}
	}
	return nd
}

// wireCluster gives a cluster its transport, ReverseProxy, health checkers
// and pre-bound metrics.
func (p *Proxy) wireCluster(cl *clusterRT, c *config.Cluster, oldCl *clusterRT) {
	activity := c.HttpRequest.ActivityTimeout.Duration
	if activity <= 0 {
		activity = c.HttpRequest.Timeout.Duration
	}
	if activity <= 0 {
		activity = defaultActivityTimeout
	}
	cl.activity = activity
	cl.clientCfg = transportConfig{client: c.HttpClient, activity: activity, sni: upstream.SNIKey(cl.sni),
		proto: upstream.ProtocolFor(c.HttpRequest.Version, c.HttpRequest.VersionPolicy, c.HttpClient.SslProtocols.Min, c.HttpClient.SslProtocols.Max)}
	if cl.tls != nil {
		cl.clientCfg.tlsFiles = cl.tls.Fingerprint
	}
	if oldCl != nil && oldCl.transport != nil && oldCl.clientCfg == cl.clientCfg {
		// A reload that leaves the client settings alone keeps the warm
		// connection pool (and MaxConnectionsPerServer counts across it).
		cl.transport, cl.lean, cl.rp = oldCl.transport, oldCl.lean, oldCl.rp
	} else {
		p.newTransport(cl, c, activity)
	}
	p.wireHealth(cl, c)
	cl.affCount = p.metrics.affinityCounters(cl.id)
	cl.errCount = p.metrics.errorCounters(cl.id)
}

// newTransport gives a cluster its own transport and ReverseProxy.
func (p *Proxy) newTransport(cl *clusterRT, c *config.Cluster, activity time.Duration) {
	dial := p.dial
	cl.transport = &http.Transport{
		Proxy: nil, // never an environment proxy
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &idleConn{Conn: sockio.Wrap(c), idle: activity}, nil
		},
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   maxIdleConnsPerHost,
		MaxConnsPerHost:       c.HttpClient.MaxConnectionsPerServer,
		IdleConnTimeout:       min(idleConnTimeout, activity),
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: activity,
		TLSClientConfig: &tls.Config{
			MinVersion:         tls.VersionTLS12,
			InsecureSkipVerify: c.HttpClient.DangerousAcceptAnyServerCertificate, //nolint:gosec // operator's explicit choice
		},
	}
	tuneTransport(cl.transport, cl)
	cl.clientCfg.proto.Apply(cl.transport)
	var base http.RoundTripper = cl.transport
	var lopts lean.Options
	if p.opts.hooks != nil {
		lopts.OnTrip = p.opts.hooks.onLeanTrip
	}
	if cl.lean = lean.New(cl.transport, lopts); cl.lean != nil {
		base = cl.lean
	}
	cl.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      &retryTransport{base: base, lean: cl.lean, p: p},
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.errorHandler,
		BufferPool:     p.buffers,
		ErrorLog:       p.errLog,
	}
}

// wireHealth gives a cluster its passive and active health checkers.
func (p *Proxy) wireHealth(cl *clusterRT, c *config.Cluster) {
	if c.HealthCheck.Passive.Enabled {
		cl.passive = health.NewPassiveWithOptions(c.HealthCheck.Passive, health.PassiveOptions{
			Metadata: c.Metadata,
			Logger:   p.logger.With("cluster", cl.id),
		})
	}
	if c.HealthCheck.Active.Enabled {
		cl.active = health.NewActive(cl.id, cl.up, c.HealthCheck.Active, health.ActiveOptions{
			Transport:   cl.transport,
			Metadata:    c.Metadata,
			Logger:      p.logger, // NewActive adds "cluster" itself
			Observer:    p.opts.HealthObserver,
			ShouldProbe: p.opts.ShouldProbe,
		})
	}
}

// parseBackendURL accepts an absolute http or https URL with a host.
func parseBackendURL(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("%q is not a URL", s)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%q: scheme must be http or https", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q: host missing", s)
	}
	if u.User != nil || u.Fragment != "" {
		return nil, fmt.Errorf("%q: user info and fragments are not allowed", u.Redacted())
	}
	return u, nil
}

// affinityErrors places affinity's errors (paths relative to the cluster
// or route, "SessionAffinity.Policy") under the cluster's or route's path.
func affinityErrors(path string, err error) config.Errors {
	var ces config.Errors
	if errors.As(err, &ces) {
		out := make(config.Errors, 0, len(ces))
		for _, e := range ces {
			switch {
			case e.Path == "":
				e.Path = path + ".SessionAffinity"
			case !strings.HasPrefix(e.Path, "ReverseProxy."):
				e.Path = path + "." + e.Path
			}
			out = append(out, e)
		}
		return out
	}
	var fe config.FieldError
	if errors.As(err, &fe) {
		if !strings.HasPrefix(fe.Path, "ReverseProxy.") {
			fe.Path = strings.TrimSuffix(path+"."+fe.Path, ".")
		}
		return config.Errors{fe}
	}
	return config.Errors{{Path: path + ".SessionAffinity", Message: err.Error()}}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// buildWaf compiles the snapshot's web application firewall (nil when no
// route runs it), keeping the old snapshot's rule set when its settings
// and rule files are unchanged. Compile (p nil) only checks.
func buildWaf(cfg *config.Config, p *Proxy, old *runtime) (*waf.Firewall, config.Errors) {
	var prev *waf.Firewall
	var opts waf.Options
	if old != nil {
		prev = old.waf
	}
	if p != nil {
		opts.Registerer = p.opts.Registerer
		opts.Audit = p.opts.WafLog
		if opts.Audit == nil {
			opts.Audit = p.logger.With("log", "waf")
		}
	}
	return waf.New(cfg, prev, opts)
}

// stopWaf drops the WAF series of routes that are gone.
func (rt *runtime) stopWaf(next *runtime) {
	if rt.waf == nil {
		return
	}
	for id := range rt.routesByID {
		if next == nil || next.routesByID[id] == nil || next.routesByID[id].waf == nil {
			rt.waf.Forget(id)
		}
	}
}
