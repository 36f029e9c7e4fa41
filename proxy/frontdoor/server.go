package frontdoor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
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

// Server owns the listeners of one node.
type Server struct {
	logger *slog.Logger
	ls     []*listener

	// limit caps open connections over all listeners; nil: no cap.
	limit *connLimit
	// acme feeds Acme listeners and ACME challenges (acme.go).
	acme acmeHook

	mu    sync.Mutex
	lns   []net.Listener
	addrs []net.Addr
	wg    sync.WaitGroup
	// reserved: Reserve ran (each listener holds its sockets); shut:
	// Shutdown ran, Start refuses.
	reserved bool
	shut     bool
}

// listener is one configured listener and the servers behind it: srv
// (net/http's, HTTP/1.1, h2 and h2c) always, h1, the own HTTP/1.1 loop,
// in front of srv when it serves HTTP/1.1, and h3 (HTTP/3 on UDP sockets
// of the same port, h3.go) when its Protocols name HTTP/3, sharing tls.
// Each server is started on the listener's sockets by serve and stopped
// by Shutdown.
type listener struct {
	cfg  config.Listener
	path string // where it was configured, for errors
	srv  *http.Server
	// h1 is nil for a listener without HTTP/1.1 (h2c only) and with
	// HTTP1Stdlib.
	h1  *h1server.Server
	tls *tls.Config // nil: cleartext
	// cert is the listener's certificate, swapped by PrepareCertificates'
	// apply so a reload rotates certificates without a restart; nil for
	// cleartext and ACME listeners.
	cert *atomic.Pointer[tls.Certificate]
	sni  []*sniRule // the Sni rules (nil for most)
	// reserved are the sockets Reserve bound, not yet listening
	// (reserve.go).
	reserved []*reservation
	// h3 is nil without HTTP/3; tcp is false for HTTP/3 alone (no TCP
	// socket). udp are the UDP sockets bound for h3 (by Reserve or bind)
	// and not yet served.
	h3  *h3Server
	tcp bool
	udp []net.PacketConn
}

// New prepares listeners for cfg.Listeners with cfg.Limits, serving h
// (redirect listeners answer with their redirect instead).
func New(cfg *config.Config, h http.Handler, logger *slog.Logger, opts ...Option) (*Server, error) {
	so := options{http1: HTTP1Own, http2: defaultHTTP2}
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
	s := &Server{logger: logger}
	if n := cfg.Limits.MaxConcurrentConnections; n > 0 {
		s.limit = &connLimit{max: int64(n)}
	}
	var errs config.Errors
	for i, l := range cfg.Listeners {
		ln, ferr := s.newListener(cfg.Limits, listenerPath(i, l), l, h, so)
		if ferr != nil {
			errs = append(errs, *ferr)
			continue
		}
		s.ls = append(s.ls, ln)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return s, nil
}

// newListener builds listener l, at path, serving h.
func (s *Server) newListener(lim config.Limits, path string, l config.Listener, h http.Handler, so options) (*listener, *config.FieldError) {
	if l.Address == "" {
		return nil, &config.FieldError{Path: path + ".Address", Message: "required"}
	}
	ln := &listener{cfg: l, path: path}
	handler := h
	if l.Redirect != nil {
		rd, err := newRedirect(l.Redirect)
		if err != nil {
			return nil, &config.FieldError{Path: path + ".Redirect", Message: err.Error()}
		}
		handler = rd
	}
	var acme *Server // answers HTTP-01 validations on cleartext listeners
	if l.Certificate == nil && !l.SelfSigned && l.Acme == nil {
		acme = s
	}
	if l.Certificate != nil || l.SelfSigned {
		cert, ferr := loadCertificate(path, l.Certificate)
		if l.Certificate == nil {
			var err error
			if cert, err = selfSigned(); err != nil {
				ferr = &config.FieldError{Path: path, Message: "generating a self-signed certificate: " + err.Error()}
			}
		}
		if ferr != nil {
			return nil, ferr
		}
		ln.cert = new(atomic.Pointer[tls.Certificate])
		ln.cert.Store(cert)
		ln.tls = listenerTLS(l, ln.cert)
	} else if l.Acme != nil {
		ln.tls = s.acmeTLS(l)
	}
	tc := ln.tls
	if tc != nil && len(l.Sni) > 0 {
		var ferr *config.FieldError
		if ln.sni, ferr = sniRules(path, l, ln.cert); ferr != nil {
			return nil, ferr
		}
		withSni(tc, ln.sni)
	}
	protocols, _ := httpProtocols(l, tc != nil)
	if tc != nil {
		sniProtocols(protocols, l)
	}
	maxHeader := lim.MaxRequestHeadersTotalSize
	if maxHeader <= 0 {
		maxHeader = defaultMaxHeaderBytes
	}
	idle := orDefault(lim.KeepAliveTimeout.Duration, defaultKeepAliveTimeout)
	handler = headerLimit(maxHeader, so.http2 == HTTP2Own, acme, handler)
	ln.tcp = true
	if config.ProtocolsHTTP3(l.Protocols) {
		if tc == nil {
			return nil, &config.FieldError{Path: path + ".Protocols", Message: l.Protocols + ": HTTP/3 needs TLS (an https Url, a Certificate or Acme)"}
		}
		ln.h3 = newH3Server(l, handler, maxHeader, idle, orDefault(lim.RequestHeadersTimeout.Duration, defaultHeadersTimeout), s.limit, s.logger)
		ln.tcp = config.ProtocolsTCP(l.Protocols) != ""
		handler = ln.h3.altSvcHandler(handler)
	}
	srv := &http.Server{
		Handler:           handler,
		Protocols:         protocols,
		TLSConfig:         tc,
		MaxHeaderBytes:    maxHeader,
		ReadHeaderTimeout: orDefault(lim.RequestHeadersTimeout.Duration, defaultHeadersTimeout),
		IdleTimeout:       idle,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug),
	}
	if tc != nil {
		srv.ConnState = firstBytesSeen
	}
	if so.http2 == HTTP2Own && (protocols.HTTP2() || protocols.UnencryptedHTTP2()) {
		// srv's h2 and h2c connections go to the own server
		// (TLSNextProto), whoever accepted them.
		h2server.New(srv)
	}
	ln.srv = srv
	if protocols.HTTP1() && so.http1 == HTTP1Own && ln.tcp {
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
		ln.h1 = h1server.New(srv)
	}
	return ln, nil
}

// listenerPath names listener i in errors: where it was configured.
func listenerPath(i int, l config.Listener) string {
	if l.Source != "" {
		return l.Source
	}
	return fmt.Sprintf("Listeners[%d]", i)
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
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
	lns := make([]net.Listener, 0, len(s.ls))
	var owner []*listener // owner[k] is the listener lns[k] serves
	var addrs []net.Addr
	for i, l := range s.ls {
		bound, err := l.bind(s.logger)
		if err != nil {
			for _, ln := range lns {
				_ = ln.Close()
			}
			for _, done := range s.ls[:i] {
				closeAll(done.udp)
				done.udp = nil
			}
			return err
		}
		if !l.tcp {
			for _, pc := range l.udp {
				addrs = append(addrs, pc.LocalAddr())
			}
		}
		for _, ln := range bound {
			addrs = append(addrs, ln.Addr())
			ln = sockio.Listener{Listener: ln}
			if s.limit != nil {
				ln = &limitListener{Listener: ln, lim: s.limit}
			}
			if l.tls != nil {
				ln = firstBytesListener{Listener: ln, wait: l.srv.ReadHeaderTimeout}
			}
			lns = append(lns, ln)
			owner = append(owner, l)
		}
	}
	s.lns, s.addrs = lns, addrs
	for _, l := range s.ls {
		if l.h3 != nil {
			tc := l.h3.quicTLS(l.tls)
			l.h3.mu.Lock()
			l.h3.pcs = l.udp
			l.h3.mu.Unlock()
			for _, pc := range l.udp {
				s.wg.Add(1)
				go func() {
					defer s.wg.Done()
					if err := l.h3.serve(pc, tc); err != nil && !errors.Is(err, http.ErrServerClosed) {
						s.logger.Error("listener stopped", "addr", pc.LocalAddr().String(), "proto", "udp", "err", err)
					}
				}()
			}
			l.udp = nil
		}
		if l.h1 == nil {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			// The connections the own loop hands over.
			if err := l.h1.ServeHandoff(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.logger.Error("listener stopped", "err", err)
			}
		}()
	}
	for k, ln := range lns {
		l := owner[k]
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := l.serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.logger.Error("listener stopped", "addr", ln.Addr().String(), "err", err)
			}
		}()
	}
	return nil
}

// serve serves the connections ln accepts until the listener shuts down.
func (l *listener) serve(ln net.Listener) error {
	switch {
	case l.h1 != nil && l.tls != nil:
		return l.h1.ServeTLS(ln, l.tls) // h2 by ALPN goes to srv
	case l.h1 != nil:
		return l.h1.Serve(ln)
	case l.tls != nil:
		return l.srv.ServeTLS(ln, "", "") // certificates come from TLSConfig; h2 via ALPN
	default:
		return l.srv.Serve(ln)
	}
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
	errs := make([]error, 3*len(s.ls)) // each http.Server's, each own loop's, each HTTP/3 server's
	for i, l := range s.ls {
		if l.h3 != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[2*len(s.ls)+i] = l.h3.shutdown(ctx)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.srv.Shutdown(ctx); err != nil {
				errs[i] = err
				_ = l.srv.Close()
			}
		}()
		if l.h1 != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[len(s.ls)+i] = l.h1.Shutdown(ctx) // on ctx's end it closes what is left
			}()
		}
	}
	wg.Wait()
	s.wg.Wait()
	return errors.Join(errs...)
}
