package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/h1server"
	"github.com/tether-proxy/tether/proxy/h2server"
	"github.com/tether-proxy/tether/proxy/internal/sockio"
)

// Defaults for Limits left zero by a config built in code.
const (
	defaultMaxHeaderBytes    = 32 << 10
	defaultHeadersTimeout    = 30 * time.Second
	defaultKeepAliveTimeout  = 130 * time.Second
	defaultRedirectStatus    = http.StatusPermanentRedirect
	statusHeaderFieldsTooBig = http.StatusRequestHeaderFieldsTooLarge
)

// HTTP1Server names what serves cleartext HTTP/1.1 connections
// (docs/OPERATIONS.md, "The HTTP/1.1 server").
type HTTP1Server string

const (
	// HTTP1Own is tether's own HTTP/1.1 loop (package h1server), which hands a
	// connection to net/http at the first request it does not take. The
	// default.
	HTTP1Own HTTP1Server = "own"
	// HTTP1Stdlib serves every connection with net/http's server.
	HTTP1Stdlib HTTP1Server = "stdlib"
)

// ParseHTTP1Server reads an --http1-server value; "" is the default.
func ParseHTTP1Server(s string) (HTTP1Server, error) {
	switch v := HTTP1Server(strings.ToLower(strings.TrimSpace(s))); v {
	case "":
		return HTTP1Own, nil
	case HTTP1Own, HTTP1Stdlib:
		return v, nil
	}
	return "", fmt.Errorf("http1 server %q is not own or stdlib", s)
}

// HTTP2Server names what serves HTTP/2 connections, h2 over TLS and h2c
// (docs/OPERATIONS.md, "The HTTP/2 server").
type HTTP2Server string

const (
	// HTTP2Own is tether's own HTTP/2 server (package h2server);
	// experimental.
	HTTP2Own HTTP2Server = "own"
	// HTTP2Stdlib is net/http's HTTP/2 server. The default.
	HTTP2Stdlib HTTP2Server = "stdlib"
)

// defaultHTTP2 serves HTTP/2 when no option says otherwise (a test run may
// change it: h2mode_test.go).
var defaultHTTP2 = HTTP2Stdlib

// ParseHTTP2Server reads an --http2-server value; "" is the default.
func ParseHTTP2Server(s string) (HTTP2Server, error) {
	switch v := HTTP2Server(strings.ToLower(strings.TrimSpace(s))); v {
	case "":
		return HTTP2Stdlib, nil
	case HTTP2Own, HTTP2Stdlib:
		return v, nil
	}
	return "", fmt.Errorf("http2 server %q is not own or stdlib", s)
}

// ServerOption tunes a Server beyond its configuration file.
type ServerOption func(*serverOptions)

type serverOptions struct {
	http1 HTTP1Server
	http2 HTTP2Server
}

// WithHTTP2Server chooses what serves HTTP/2 (default HTTP2Stdlib).
func WithHTTP2Server(v HTTP2Server) ServerOption {
	return func(o *serverOptions) { o.http2 = v }
}

// WithHTTP1Server chooses what serves cleartext HTTP/1.1 (default
// HTTP1Own).
func WithHTTP1Server(v HTTP1Server) ServerOption {
	return func(o *serverOptions) { o.http1 = v }
}

// Server owns the listeners of one node.
type Server struct {
	logger    *slog.Logger
	listeners []config.Listener
	servers   []*http.Server
	// h1 is each HTTP/1.1 listener's own server loop (package h1server),
	// cleartext or HTTPS; nil for the others (h2c only) and with HTTP1Stdlib.
	h1        []*h1server.Server
	tlsConfig []*tls.Config
	// certs holds each HTTPS listener's certificate, swapped by
	// PrepareCertificates' apply so a reload rotates certificates without a
	// restart; nil for plain listeners.
	certs []*atomic.Pointer[tls.Certificate]
	// sni holds each listener's Sni rules (nil for most).
	sni [][]*sniRule

	// limit caps open connections over all listeners; nil: no cap.
	limit *connLimit
	// acme feeds Acme listeners and ACME challenges (acme.go).
	acme acmeHook

	mu    sync.Mutex
	lns   []net.Listener
	addrs []net.Addr
	wg    sync.WaitGroup
	// reserved are each listener's sockets bound by Reserve, not yet
	// listening (reserve.go); shut: Shutdown ran, Start refuses.
	reserved [][]*reservation
	shut     bool
}

// NewServer prepares listeners for cfg.Listeners with cfg.Limits, serving h
// (redirect listeners answer with their redirect instead).
func NewServer(cfg *config.Config, h http.Handler, logger *slog.Logger, opts ...ServerOption) (*Server, error) {
	so := serverOptions{http1: HTTP1Own, http2: defaultHTTP2}
	for _, o := range opts {
		o(&so)
	}
	if so.http1 != HTTP1Own && so.http1 != HTTP1Stdlib {
		return nil, fmt.Errorf("http1 server %q is not own or stdlib", so.http1)
	}
	if so.http2 != HTTP2Own && so.http2 != HTTP2Stdlib {
		return nil, fmt.Errorf("http2 server %q is not own or stdlib", so.http2)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	lim := cfg.Limits
	maxHeader := lim.MaxRequestHeadersTotalSize
	if maxHeader <= 0 {
		maxHeader = defaultMaxHeaderBytes
	}
	headersTimeout := orDefault(lim.RequestHeadersTimeout.Duration, defaultHeadersTimeout)
	idle := orDefault(lim.KeepAliveTimeout.Duration, defaultKeepAliveTimeout)
	s := &Server{logger: logger, listeners: cfg.Listeners}
	if n := lim.MaxConcurrentConnections; n > 0 {
		s.limit = &connLimit{max: int64(n)}
	}
	var errs config.Errors
	for i, l := range cfg.Listeners {
		path := listenerPath(i, l)
		if l.Address == "" {
			errs = append(errs, config.FieldError{Path: path + ".Address", Message: "required"})
			continue
		}
		var handler http.Handler = h
		if l.Redirect != nil {
			rd, err := newRedirect(l.Redirect)
			if err != nil {
				errs = append(errs, config.FieldError{Path: path + ".Redirect", Message: err.Error()})
				continue
			}
			handler = rd
		}
		if l.Certificate == nil && !l.SelfSigned && l.Acme == nil {
			handler = s.acmeChallenges(handler)
		}
		var tc *tls.Config
		var cur *atomic.Pointer[tls.Certificate]
		if l.Certificate != nil || l.SelfSigned {
			cert, ferr := loadCertificate(path, l.Certificate)
			if l.Certificate == nil {
				var err error
				if cert, err = selfSigned(); err != nil {
					ferr = &config.FieldError{Path: path, Message: "generating a self-signed certificate: " + err.Error()}
				}
			}
			if ferr != nil {
				errs = append(errs, *ferr)
				continue
			}
			cur = new(atomic.Pointer[tls.Certificate])
			cur.Store(cert)
			tc = listenerTLS(l, cur)
		} else if l.Acme != nil {
			tc = s.acmeTLS(l)
		}
		var rules []*sniRule
		if tc != nil && len(l.Sni) > 0 {
			var ferr *config.FieldError
			if rules, ferr = sniRules(path, l, cur); ferr != nil {
				errs = append(errs, *ferr)
				continue
			}
			withSni(tc, rules)
		}
		protocols, _ := httpProtocols(l, tc != nil)
		if tc != nil {
			sniProtocols(protocols, l)
		}
		srv := &http.Server{
			Handler:           headerLimit(maxHeader, handler),
			Protocols:         protocols,
			TLSConfig:         tc,
			MaxHeaderBytes:    maxHeader,
			ReadHeaderTimeout: headersTimeout,
			IdleTimeout:       idle,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
		}
		if tc != nil {
			srv.ConnState = firstBytesSeen
		}
		if so.http2 == HTTP2Own && (protocols.HTTP2() || protocols.UnencryptedHTTP2()) {
			// srv's h2 and h2c connections go to the own server
			// (TLSNextProto), whoever accepted them.
			h2server.New(srv)
		}
		s.servers = append(s.servers, srv)
		var h1 *h1server.Server
		if protocols.HTTP1() && so.http1 == HTTP1Own {
			if tc != nil {
				// The loop shakes hands with tc. net/http serves the
				// connections it hands over (HTTP/2 among them) and
				// configures HTTP/2 from its TLSConfig as Serve starts,
				// which writes to it: a copy of its own, naming h2 when
				// the listener (or one of its Sni entries) speaks it.
				srv.TLSConfig = tc.Clone()
				if protocols.HTTP2() && !slices.Contains(srv.TLSConfig.NextProtos, "h2") {
					srv.TLSConfig.NextProtos = append(srv.TLSConfig.NextProtos, "h2")
				}
			}
			h1 = h1server.New(srv)
		}
		s.h1 = append(s.h1, h1)
		s.tlsConfig = append(s.tlsConfig, tc)
		s.certs = append(s.certs, cur)
		s.sni = append(s.sni, rules)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return s, nil
}

func loadCertificate(path string, c *config.Certificate) (*tls.Certificate, *config.FieldError) {
	if c == nil {
		return nil, nil
	}
	cert, err := config.LoadCertificate(c)
	if err != nil {
		return nil, &config.FieldError{Path: path + ".Certificate", Message: err.Error()}
	}
	return cert, nil
}

// listenerPath names listener i in errors: where it was configured.
func listenerPath(i int, l config.Listener) string {
	if l.Source != "" {
		return l.Source
	}
	return fmt.Sprintf("Listeners[%d]", i)
}

// PrepareCertificates loads the certificates cfg names for the HTTPS
// listeners this server already runs (same position and address) and
// returns apply, which swaps them in: new TLS handshakes use them, open
// connections keep theirs. Nothing is swapped when any certificate fails to
// load, so a reload can refuse a bad certificate and keep serving the old.
// Other listener changes need a restart.
func (s *Server) PrepareCertificates(cfg *config.Config) (apply func(), err error) {
	var errs config.Errors
	type swap struct {
		to   *atomic.Pointer[tls.Certificate]
		cert *tls.Certificate
	}
	var swaps []swap
	for i, l := range cfg.Listeners {
		if i >= len(s.certs) || s.certs[i] == nil || l.Address != s.listeners[i].Address {
			continue
		}
		if l.Certificate != nil {
			cert, ferr := loadCertificate(listenerPath(i, l), l.Certificate)
			if ferr != nil {
				errs = append(errs, *ferr)
				continue
			}
			swaps = append(swaps, swap{s.certs[i], cert})
		}
		// Sni entries' own certificates, while the entries are the same.
		if rules := s.sni[i]; len(rules) == len(l.Sni) {
			for j, r := range l.Sni {
				if r.Certificate == nil || !rules[j].own || rules[j].pattern != r.Pattern {
					continue
				}
				cert, ferr := loadCertificate(listenerPath(i, l)+".Sni."+r.Pattern, r.Certificate)
				if ferr != nil {
					errs = append(errs, *ferr)
					continue
				}
				swaps = append(swaps, swap{rules[j].cur, cert})
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return func() {
		for _, sw := range swaps {
			sw.to.Store(sw.cert)
		}
	}, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// headerLimit answers 431 when the request line plus header block exceeds
// max bytes. net/http enforces MaxHeaderBytes with 4 KiB of slack; this
// makes the configured figure exact.
func headerLimit(max int, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 {
			growStack() // a new goroutine per stream (stack.go)
		}
		n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
		for k, vs := range r.Header {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
		if r.Host != "" && r.Header["Host"] == nil {
			n += len("Host") + len(r.Host) + 4
		}
		if n > max {
			w.Header().Set("Connection", "close")
			http.Error(w, "request header fields too large", statusHeaderFieldsTooBig)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Start binds every listener (or listens on the sockets Reserve bound) and
// serves in the background. It returns an error (naming the address) if any
// listener cannot bind, after closing the ones already bound.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lns != nil {
		return errors.New("server already started")
	}
	if s.shut {
		return http.ErrServerClosed
	}
	if err := s.checkAcme(); err != nil {
		return err
	}
	lns := make([]net.Listener, 0, len(s.servers))
	var owner []int // owner[k] is the listener lns[k] serves
	for i := range s.servers {
		bound, err := s.bind(i)
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return err
		}
		for _, ln := range bound {
			ln = sockio.Listener{Listener: ln}
			if s.limit != nil {
				ln = &limitListener{Listener: ln, lim: s.limit}
			}
			if s.tlsConfig[i] != nil {
				ln = firstBytesListener{Listener: ln, wait: s.servers[i].ReadHeaderTimeout}
			}
			lns = append(lns, ln)
			owner = append(owner, i)
		}
	}
	s.lns, s.addrs = lns, nil
	for _, h1 := range s.h1 {
		if h1 == nil {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			// The connections the own loop hands over.
			if err := h1.ServeHandoff(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.logger.Error("listener stopped", "err", err)
			}
		}()
	}
	for k, ln := range lns {
		s.addrs = append(s.addrs, ln.Addr())
		srv := s.servers[owner[k]]
		h1 := s.h1[owner[k]]
		tlsConf := s.tlsConfig[owner[k]]
		tlsOn := tlsConf != nil
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			var err error
			switch {
			case h1 != nil && tlsOn:
				err = h1.ServeTLS(ln, tlsConf) // h2 by ALPN goes to srv
			case h1 != nil:
				err = h1.Serve(ln)
			case tlsOn:
				err = srv.ServeTLS(ln, "", "") // certificates come from TLSConfig; h2 via ALPN
			default:
				err = srv.Serve(ln)
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.logger.Error("listener stopped", "addr", ln.Addr().String(), "err", err)
			}
		}()
	}
	return nil
}

// Addrs are the bound addresses, in cfg.Listeners order (":0" resolved;
// a "localhost" listener contributes 127.0.0.1 and then ::1).
func (s *Server) Addrs() []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]net.Addr(nil), s.addrs...)
}

// Shutdown stops accepting and waits for in-flight requests until ctx ends;
// then it closes what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	s.releaseReserved()
	var wg sync.WaitGroup
	errs := make([]error, 2*len(s.servers)) // each http.Server's, then each own loop's
	for i, srv := range s.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Shutdown(ctx); err != nil {
				errs[i] = err
				_ = srv.Close()
			}
		}()
		if h1 := s.h1[i]; h1 != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[len(s.servers)+i] = h1.Shutdown(ctx) // on ctx's end it closes what is left
			}()
		}
	}
	wg.Wait()
	s.wg.Wait()
	return errors.Join(errs...)
}

// redirect answers every request with a redirect built from a Redirect rule.
type redirect struct {
	scheme       string
	host         string
	port         int
	status       int
	includePath  bool
	includeQuery bool
}

func newRedirect(r *config.Redirect) (*redirect, error) {
	rd := &redirect{
		scheme:       strings.ToLower(r.Scheme),
		host:         r.Host,
		port:         r.Port,
		status:       r.StatusCode,
		includePath:  r.IncludePath == nil || *r.IncludePath,
		includeQuery: r.IncludeQueryString == nil || *r.IncludeQueryString,
	}
	if rd.status == 0 {
		rd.status = defaultRedirectStatus
	}
	switch rd.status {
	case 301, 302, 303, 307, 308:
	default:
		return nil, fmt.Errorf("StatusCode %d is not 301, 302, 303, 307 or 308", r.StatusCode)
	}
	if rd.scheme != "" && rd.scheme != "http" && rd.scheme != "https" {
		return nil, fmt.Errorf("Scheme %q is not http or https", r.Scheme)
	}
	if rd.port < 0 || rd.port > 65535 {
		return nil, fmt.Errorf("Port %d out of range", r.Port)
	}
	return rd, nil
}

func (rd *redirect) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, rd.location(r), rd.status)
}

// location builds the target URL: fields left empty keep the request's own
// value; a scheme change without a port goes to the new scheme's default.
func (rd *redirect) location(r *http.Request) string {
	reqScheme := "http"
	if r.TLS != nil {
		reqScheme = "https"
	}
	scheme := rd.scheme
	if scheme == "" {
		scheme = reqScheme
	}
	host, port := splitHostPort(r.Host)
	if rd.host != "" {
		host = rd.host
	}
	switch {
	case rd.port != 0:
		port = strconv.Itoa(rd.port)
	case scheme != reqScheme:
		port = ""
	}
	if port == "80" && scheme == "http" || port == "443" && scheme == "https" {
		port = ""
	}
	var b strings.Builder
	b.WriteString(scheme)
	b.WriteString("://")
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	b.WriteString(host)
	if port != "" {
		b.WriteString(":")
		b.WriteString(port)
	}
	if rd.includePath {
		p := r.URL.EscapedPath()
		if p == "" {
			p = "/"
		}
		b.WriteString(p)
	} else {
		b.WriteString("/")
	}
	if rd.includeQuery && r.URL.RawQuery != "" {
		b.WriteString("?")
		b.WriteString(r.URL.RawQuery)
	}
	return b.String()
}

// splitHostPort splits a Host header value; the port may be absent.
func splitHostPort(hp string) (string, string) {
	if h, p, err := net.SplitHostPort(hp); err == nil {
		return h, p
	}
	return strings.TrimSuffix(strings.TrimPrefix(hp, "["), "]"), ""
}
