package proxy

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/proxy/accesslog"
	"github.com/tether-proxy/tether/proxy/affinity"
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/dnscache"
	"github.com/tether-proxy/tether/proxy/errpage"
	"github.com/tether-proxy/tether/proxy/forwarded"
	"github.com/tether-proxy/tether/proxy/health"
	"github.com/tether-proxy/tether/proxy/hygiene"
	"github.com/tether-proxy/tether/proxy/internal/cancelhook"
	"github.com/tether-proxy/tether/proxy/internal/h1wire"
	"github.com/tether-proxy/tether/proxy/lean"
	"github.com/tether-proxy/tether/proxy/routetimeout"
	"github.com/tether-proxy/tether/proxy/tracing"
	"github.com/tether-proxy/tether/proxy/upstream"
	"github.com/tether-proxy/tether/proxy/waf"
)

// ErrNotFound is returned for an unknown cluster or destination id.
var ErrNotFound = errors.New("not found")

// Options are the data path's collaborators. Zero values take defaults.
type Options struct {
	Logger *slog.Logger
	// AccessLog receives one JSON line per request; nil disables it. An
	// accesslog.Log's Logger gets the lines without slog's per-record cost,
	// in batches.
	AccessLog *slog.Logger
	// Registerer receives the data path's metrics; nil: not registered.
	Registerer prometheus.Registerer
	// Keyring seals Cookie, CustomHeader and Envelope affinity values.
	Keyring affinity.Keyring
	// Dial dials destinations (a DNS-caching resolver's DialContext); nil:
	// Resolver's DialContext.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Resolver is the DNS cache when Dial is nil; nil: a new one with
	// default options, closed by Close. Its names are looked up as soon
	// as a configuration is in place (warmdns.go).
	Resolver *dnscache.Resolver
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
	// NodeID is this node's id. Logger is expected to carry it already
	// (node/ passes a logger with "node" set): New does not add it again,
	// so every log line has each key once.
	NodeID string
	// HealthObserver receives every active checker's verdicts and decides
	// effective health (cluster-wide, from gossip); nil:
	// health.LocalObserver per cluster. Destinations are found by id through
	// Proxy.Cluster.
	HealthObserver health.Observer
	// Tracing records and exports tether's spans; nil: an OTLP exporter
	// when the OTEL_* environment asks for one, else none (the default).
	Tracing *tracing.Exporter
	// ShouldProbe tells active checkers whether this node probes a
	// destination (probe fan-out); nil: every destination is probed.
	ShouldProbe func(clusterID, destID string) bool
	// WafLog receives the WAF's audit lines (JSON, one per flagged
	// request); nil: Logger, with "log": "waf".
	WafLog *slog.Logger

	// hooks: tests' handles (testHooks); nil outside tests.
	hooks *testHooks
}

// Proxy is the data path of one node: an http.Handler over the current
// routes and clusters, swapped atomically on Update.
type Proxy struct {
	rt     atomic.Pointer[runtime]
	mu     sync.Mutex // serialises Update and Close
	closed bool
	opts   Options
	logger *slog.Logger
	access *slog.Logger
	// fastAccess is set when access is an accesslog.Log's logger: lines are
	// encoded straight into its batch.
	fastAccess *accesslog.Log
	now        func() time.Time
	dial       func(ctx context.Context, network, addr string) (net.Conn, error)
	// watch is the minimum data rates' heartbeat (rate.go).
	watch *rateWatch
	// resolver is the DNS cache when Options.Dial was nil; Close stops its
	// background refreshes when New made it (ownResolver).
	resolver    *dnscache.Resolver
	ownResolver bool
	metrics     *metrics
	buffers     *bufferPool
	errLog      *log.Logger
	states      sync.Pool
	dp          affinity.YarpRing
	// tracing exports spans; nil when export is off. ownTracing: New made
	// it, so Close shuts it down.
	tracing    *tracing.Exporter
	ownTracing bool
	// warm and warmCtx: warmDNS's lookups, waited for and cancelled by
	// Close.
	warm       sync.WaitGroup
	warmCtx    context.Context
	warmCancel context.CancelFunc
}

// testHooks are tests' handles on the data path, given in Options by
// tests only; production leaves them nil.
type testHooks struct {
	noDirect   bool   // the direct path off
	onDirect   func() // told of each request the direct path takes
	onLeanTrip func() // told of each request a lean transport takes
	// onRewrite ends each rewrite of an outgoing request, as a transform
	// would, on the direct path and on ReverseProxy's.
	onRewrite func(out *http.Request)
	// onResponse ends the route's response transforms, as one more would,
	// on the direct path and on ReverseProxy's.
	onResponse func(res *http.Response)
}

var _ http.Handler = (*Proxy)(nil)

// New builds the data path for cfg and starts its health checkers.
func New(cfg *config.Config, opts Options) (*Proxy, error) {
	p := &Proxy{opts: opts, logger: opts.Logger, access: opts.AccessLog, now: opts.Now, dial: opts.Dial}
	if p.logger == nil {
		p.logger = slog.New(slog.DiscardHandler)
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.dial == nil {
		p.resolver = opts.Resolver
		if p.resolver == nil {
			p.resolver = dnscache.New(dnscache.Options{Logger: p.logger})
			p.ownResolver = true
		}
		p.dial = p.resolver.DialContext
	}
	p.warmCtx, p.warmCancel = context.WithCancel(context.Background())
	if opts.AccessLog != nil {
		p.fastAccess = accesslog.Of(opts.AccessLog)
	}
	p.buffers = &bufferPool{}
	p.errLog = slog.NewLogLogger(p.logger.Handler(), slog.LevelDebug)
	p.states.New = func() any {
		st := new(reqState)
		st.direct.Got1xx = st.write1xx
		st.own = newOwnSet()
		return st
	}
	p.metrics = newMetrics(opts.Registerer, p, p.logger)
	p.watch = newRateWatch(p.metrics)
	rt, errs := build(cfg, p, nil)
	if errs != nil {
		return nil, errs
	}
	if err := p.initTracing(); err != nil {
		return nil, err
	}
	rt.start()
	p.rt.Store(rt)
	p.warmDNS(rt)
	return p, nil
}

// Update swaps in new routes and clusters without dropping in-flight
// requests; destinations whose id and addresses are unchanged keep their
// state (health, drain, in-flight counts). An invalid cfg is refused and the
// old one kept.
func (p *Proxy) Update(cfg *config.Config) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("proxy closed")
	}
	old := p.rt.Load()
	rt, errs := build(cfg, p, old)
	if errs != nil {
		return errs
	}
	rt.start()
	p.rt.Store(rt)
	old.stop(rt)
	p.metrics.forget(old, rt)
	p.warmDNS(rt)
	return nil
}

// Close stops health checkers and DNS refreshes and closes idle backend
// connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	if rt := p.rt.Load(); rt != nil {
		rt.stop(nil)
	}
	p.warmCancel()
	p.watch.close()
	if p.ownResolver {
		p.resolver.Close()
	}
	p.warm.Wait()
	p.closeTracing()
}

// Cluster returns the runtime cluster with the given id, or nil.
func (p *Proxy) Cluster(id string) *upstream.Cluster {
	if cl := p.rt.Load().clusters[id]; cl != nil {
		return cl.up
	}
	return nil
}

// ClusterIDs lists the configured clusters, sorted.
func (p *Proxy) ClusterIDs() []string { return slices.Clone(p.rt.Load().clusterIDs) }

// SetDraining starts (on=true, deadline now+the cluster's DrainTimeout) or
// stops draining a destination. Drain state survives reloads.
func (p *Proxy) SetDraining(clusterID, destID string, on bool) (deadline time.Time, err error) {
	cl := p.rt.Load().clusters[clusterID]
	if cl == nil {
		return time.Time{}, fmt.Errorf("cluster %q: %w", clusterID, ErrNotFound)
	}
	d := cl.up.Destination(destID)
	if d == nil {
		return time.Time{}, fmt.Errorf("cluster %q destination %q: %w", clusterID, destID, ErrNotFound)
	}
	if !on {
		d.SetDraining(time.Time{})
		return time.Time{}, nil
	}
	deadline = p.now().Add(cl.drainTimeout)
	d.SetDraining(deadline)
	return deadline, nil
}

// DrainTimeout is how long destination destID of cluster clusterID keeps
// its affinitized sessions once draining (the cluster's DrainTimeout). The
// leader turns it into the absolute deadline it replicates.
func (p *Proxy) DrainTimeout(clusterID, destID string) (time.Duration, error) {
	cl := p.rt.Load().clusters[clusterID]
	if cl == nil {
		return 0, fmt.Errorf("cluster %q: %w", clusterID, ErrNotFound)
	}
	if cl.up.Destination(destID) == nil {
		return 0, fmt.Errorf("cluster %q destination %q: %w", clusterID, destID, ErrNotFound)
	}
	return cl.drainTimeout, nil
}

// ApplyDrains sets every destination's drain state from drain, which
// reports the deadline of a draining destination (ok false: not draining).
// The node calls it whenever the replicated drain state changes and after
// each reload, so destinations a reload adds get their state too.
func (p *Proxy) ApplyDrains(drain func(clusterID, destID string) (deadline time.Time, ok bool)) {
	for id, cl := range p.rt.Load().clusters {
		for _, d := range cl.up.Destinations {
			deadline, ok := drain(id, d.ID)
			cur, curDeadline := d.Draining()
			switch {
			case ok && (!cur || !curDeadline.Equal(deadline)):
				if deadline.IsZero() {
					deadline = time.Unix(0, 1) // drained at once
				}
				d.SetDraining(deadline)
			case !ok && cur:
				d.SetDraining(time.Time{})
			}
		}
	}
}

// reqState travels from ServeHTTP to the ReverseProxy hooks in the request
// context. Pooled: every hook runs before ServeHTTP returns.
type reqState struct {
	rw respWriter
	// wnext and wprev link the states under the rate heartbeat's watch
	// (watched), rate.go.
	wnext, wprev *reqState
	watched      bool
	route        *routeRT
	cluster      *clusterRT
	dest         *upstream.Destination
	dec          affinity.Decision
	client       forwarded.Client
	traceVal     [1]string // the response's trace id field, without an allocation
	// traceAside: the direct path writes traceVal beside the response's
	// map (its fieldsAdopter), so modifyResponseState leaves it out.
	traceAside bool
	trace      reqTrace
	// sctx is the request's state context, made with its traceparent
	// (startTrace); nil when an exporter made the traceparent.
	sctx *stateCtx
	// upstream is the backend's status as seen by ModifyResponse.
	upstream int
	kind     errKind
	// body is the client's body wrapper, when the request has a body.
	body *clientBody
	// aborted: the response was cut mid-way (ReverseProxy's
	// http.ErrAbortHandler), after the status went out.
	aborted bool
	buf     [8]*upstream.Destination
	waf     *waf.Tx
	// directOut is the outgoing request of the direct path (direct.go),
	// nil on the ReverseProxy path; its header map and URL are outHeader
	// and outURL, and outHeader is kept, cleared, for the next request.
	directOut *http.Request
	outReq    http.Request // what directOut points to
	direct    lean.Direct  // directOut's response parts and where its 1xx go
	outHeader http.Header
	outURL    url.URL
	// fwdClean: the direct path's outgoing header holds no field that
	// forwarded.Set drops (spoofable ones, underscore spellings).
	fwdClean bool
	// aside: the direct path keeps tether's own fields of the outgoing
	// request (forwarding, trace), and maybe the client's, out of its
	// map, in own, which the head writer writes beside the map's
	// (beside); owned says they are there and not in the map yet,
	// where ownFields puts them for whatever reads it instead (a retry's
	// clone).
	aside bool
	owned bool
	own   *ownSet
}

// beside is the outgoing request's fields kept out of its map.
func (st *reqState) beside() h1wire.Beside {
	if !st.owned {
		return h1wire.Beside{}
	}
	fs := st.own.fields
	return h1wire.Beside{Fields: fs[ownFixed:], Own: fs[:ownFixed]}
}

// ownSet is the fields of the direct path's outgoing requests kept out of
// their map, which a state keeps from one request to the next: tether's
// own first, each one's name and value slot staying, only the values
// changing; then the client's fields of the request, when they are kept
// aside too (its User-Agent last, h1wire.Beside).
type ownSet struct {
	// vals are the forwarding fields' values (forwarded.Set's vals), in
	// the map or aside.
	vals   [forwarded.Headers]string
	fields []h1wire.Field
}

// ownFixed is how many of ownSet.fields are tether's own.
const ownFixed = forwarded.Headers + 1

func newOwnSet() *ownSet {
	o := &ownSet{fields: make([]h1wire.Field, ownFixed, ownFixed+8)}
	for i, k := range forwarded.Keys {
		o.fields[i] = h1wire.Field{Name: k, Values: o.vals[i : i+1 : i+1]}
	}
	o.fields[forwarded.Headers].Name = traceparentKey // its values are the request's (reqTrace.header)
	return o
}

// reset lets go of the last request's values.
func (o *ownSet) reset() {
	clear(o.vals[:])
	o.fields[forwarded.Headers].Values = nil
	if len(o.fields) > ownFixed {
		clear(o.fields[ownFixed:])
		o.fields = o.fields[:ownFixed]
	}
}

// ownFields puts the direct path's own fields kept aside into its
// outgoing request's map.
func (st *reqState) ownFields() {
	st.beside().Map(st.outReq.Header)
	st.owned = false
}

type stateKey struct{}

func stateFrom(ctx context.Context) *reqState {
	st, _ := ctx.Value(stateKey{}).(*reqState)
	return st
}

// stateCtx is a request's context with its state as the stateKey value,
// as context.WithValue(ctx, stateKey{}, st) would make it, and the buffer
// of its traceparent (startTrace): one allocation for the two, each of
// which a transport may hold after the request.
type stateCtx struct {
	context.Context
	st *reqState
	tp tracing.HeaderBuf
}

func (c *stateCtx) Value(key any) any {
	if key == (stateKey{}) {
		return c.st
	}
	return c.Context.Value(key)
}

func (c *stateCtx) String() string {
	return fmt.Sprint(c.Context) + ".WithValue(proxy.stateKey, *proxy.reqState)"
}

// stateContext is r's context with st as its stateKey value: the one
// startTrace made from r's context along with the traceparent (r is
// ServeHTTP's, whose context nothing replaces in between), else a new
// one.
func (st *reqState) stateContext(r *http.Request) context.Context {
	if sc := st.sctx; sc != nil {
		return sc
	}
	return &stateCtx{Context: r.Context(), st: st}
}

// ServeHTTP proxies one request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, start := cancelhook.Loop(r.Context()) // the own loop's time.Now, just taken
	if start.IsZero() || p.opts.Now != nil {
		start = p.now()
	}
	rt := p.rt.Load()
	st := p.states.Get().(*reqState)
	st.rw.w = w
	st.client.Host = forwarded.HostOf(r.RemoteAddr)
	st.client.Trusted = rt.trust.Trusts(st.client.Host)
	st.client.Proto = forwarded.ClientProto(r, st.client.Trusted)
	st.rw.grpc = errpage.IsGRPC(r)
	st.rw.rate = rt.respRate
	if st.rw.rate.on() {
		st.rw.heartbeat = p.watch
		p.watch.add(st) // tether's own answers are held to the rate too
	}
	p.startTrace(r, st)
	defer p.finish(rt, st, r, start)
	p.serve(rt, st, w, r, start)
}

// serve is ServeHTTP's after the state is set up, apart so that each has
// few returns times defers: the compiler open-codes their defers.
func (p *Proxy) serve(rt *runtime, st *reqState, w http.ResponseWriter, r *http.Request, start time.Time) {
	// The own HTTP/1.1 loop's parser refuses a head with an Upgrade,
	// HTTP2-Settings or Transfer-Encoding field (h1server's
	// parseRequestHead), which net/http then reads: the look for them in
	// a request of that parser's would find none (proxy/DESIGN.md).
	var status int
	if cancelhook.Parsed(r.Context()) != "" {
		status = hygiene.CheckParsed(r)
	} else {
		hygiene.Sanitize(w, r)
		status = hygiene.Check(r)
	}
	if status != 0 {
		st.kind = kindBadRequest
		rt.noRouteErrs[kindBadRequest].Inc()
		writeError(&st.rw, status, st.client.TraceID)
		return
	}
	hygiene.CleanPath(r)
	rr := rt.match(r)
	if rr == nil {
		st.kind = kindNoRoute
		rt.noRouteErrs[kindNoRoute].Inc()
		writeError(&st.rw, http.StatusNotFound, st.client.TraceID)
		return
	}
	st.route, st.cluster = rr, rr.cluster
	cl := rr.cluster
	body := r.Body
	if r.ContentLength == 0 && r.ProtoMajor == 2 {
		// An HTTP/2 request whose stream ended with its headers still has a
		// Body (never http.NoBody); it has nothing to read, as ReverseProxy
		// assumes of every request with ContentLength 0.
		body = http.NoBody
	}
	if rr.maxBody > 0 && body != nil && body != http.NoBody {
		if r.ContentLength > rr.maxBody {
			p.fail(st, http.StatusRequestEntityTooLarge, kindBodyTooLarge)
			return
		}
		body = http.MaxBytesReader(w, body, rr.maxBody)
	}
	if body != nil && body != http.NoBody {
		ctl := http.NewResponseController(w)
		// Stream both ways at once, as Kestrel does: an HTTP/1 response may
		// start while the upload goes on (net/http would otherwise swallow
		// the rest of the upload before the first response byte).
		_ = ctl.EnableFullDuplex()
		cb := &clientBody{rc: body, ctl: ctl, idle: cl.activity, h1: r.ProtoMajor == 1}
		if !(st.rw.grpc && r.ProtoMajor >= 2) {
			cb.rate = rt.reqRate // gRPC streams are exempt, as in YARP
		}
		p.watch.setBody(st, cb)
		st.rw.upload = cb
		body = cb
	}
	if rr.waf != nil {
		var blocked bool
		if st.waf, body, blocked = rr.waf.Check(&st.rw, r, body, st.client.TraceID); blocked {
			return
		}
	}
	now := start
	st.dec = rr.aff.ResolveClient(r, st.client.Address(r), cl.up, now, st.buf[:0])
	if rr.aff != nil {
		cl.affCount[st.dec.Outcome&3].Inc()
	}
	if st.dec.Status != 0 {
		p.failAffinity(st, st.dec.Status)
		return
	}
	cands := st.dec.Candidates
	switch len(cands) {
	case 0:
		p.fail(st, http.StatusServiceUnavailable, kindNoHealthy)
		return
	case 1:
		st.dest = cands[0]
	default:
		st.dest = cl.lb.Pick(r, cands)
	}
	d := st.dest
	if d == nil { // a policy must pick from non-empty candidates; be safe
		p.fail(st, http.StatusServiceUnavailable, kindNoHealthy)
		return
	}
	var release, stop func()
	d.Begin()
	defer func() { // one defer where three would not be open-coded
		if stop != nil {
			stop()
		}
		if release != nil {
			release()
		}
		d.Done()
	}()
	ctx, release := routetimeout.With(st.stateContext(r), routetimeout.ForRequest(rr.timeout, r, st.rw.grpc))
	if cl.clientCfg.client.MaxConnectionsPerServer > 0 {
		ctx, stop = boundSlotWait(ctx, cl.activity)
	}
	if cl.lean != nil && (p.opts.hooks == nil || !p.opts.hooks.noDirect) && (body == nil || body == http.NoBody) && d.Address.Scheme == "http" && p.direct(cl, st, r, ctx) {
		return
	}
	out := r.WithContext(ctx)
	out.Body = body
	cl.rp.ServeHTTP(&st.rw, out)
}

// flushWatched sends, last thing before the handler returns, what a
// proxied response left in the server's buffer while the rate heartbeat
// still watches it: the server would send it after the handler returned,
// where a client that does not read would hold the connection (HTTP/1.1:
// pipelined requests' small responses) or the stream (HTTP/2: no window
// left) for ever. It changes no framing: a proxied response carries the
// backend's length or is chunked (streamed) already, and tether's own
// answers carry their length (writeErrorBody). An HTTP/2 response without
// body bytes is left alone: its head needs no window, and a gRPC
// trailers-only answer must end with its HEADERS frame.
func (st *reqState) flushWatched(r *http.Request) {
	rw := &st.rw
	if !st.watched || !rw.rate.on() || !rw.wrote || st.upstream == http.StatusSwitchingProtocols {
		return
	}
	if st.upstream == 0 && rw.Header()["Content-Length"] == nil {
		return // not a proxied response, nor one of tether's own with its length
	}
	if r.ProtoMajor >= 2 && rw.bytes == 0 {
		return
	}
	_ = rw.FlushError()
}

// fail answers a request tether could not proxy.
func (p *Proxy) fail(st *reqState, status int, kind errKind) {
	st.kind = kind
	st.cluster.errCount[kind].Inc()
	st.route.tf.ApplyError(st.rw.Header(), status)
	writeError(&st.rw, status, st.client.TraceID)
}

// finish records metrics and the access log line, also when the
// ReverseProxy aborts a response with http.ErrAbortHandler.
func (p *Proxy) finish(rt *runtime, st *reqState, r *http.Request, start time.Time) {
	if v := recover(); v != nil {
		// http.ErrAbortHandler: the response was cut after it started
		// (client or backend went away mid-body). Anything else is a bug.
		// Either way count and log the request, then let net/http close the
		// connection (and log a real panic).
		st.aborted = true
		if v != http.ErrAbortHandler && !st.rw.wrote {
			st.rw.status = http.StatusInternalServerError
		}
		defer panic(v)
	}
	if st.body != nil {
		st.body.finish()
	}
	end := p.now()
	dur := end.Sub(start)
	status := st.rw.status
	switch {
	case status != 0:
	case st.upstream != 0:
		status = st.upstream // 101: the connection was hijacked
	case st.kind == kindClientGone:
		status = statusClientClosed
	default:
		status = http.StatusOK
	}
	stats := rt.noRoute
	if st.route != nil {
		stats = st.route.none
		if st.dest != nil {
			stats = st.route.stats[st.dest]
		}
	}
	stats.count(status)
	stats.observe(dur.Seconds())
	p.endTrace(st, r, status)
	st.waf.Done() // before the access line: its audit line comes first
	if p.access != nil {
		p.logAccess(r, st, stats, status, end, dur)
	}
	if !st.aborted {
		st.flushWatched(r)
	}
	p.watch.remove(st)
	h := st.outHeader
	if len(h) > 64 {
		h = nil // not worth keeping that large
	}
	clear(h)
	kept := st.direct.Kept() // Got1xx is made once per state (New): a method value allocates
	own := st.own
	own.reset()
	*st = reqState{outHeader: h, own: own}
	st.direct.Reuse(kept)
	p.states.Put(st)
}

// rewrite builds the outgoing request (ReverseProxy.Rewrite). It runs after
// ReverseProxy removed hop-by-hop headers and client forwarding headers.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	p.rewriteState(stateFrom(pr.Out.Context()), pr)
}

// rewriteState is rewrite for st, the request's state: the direct path
// holds it and need not look it up in the context.
func (p *Proxy) rewriteState(st *reqState, pr *httputil.ProxyRequest) {
	in, out := pr.In, pr.Out
	tf := st.route.tf
	src := out.Header // the client's headers, cleaned by ReverseProxy
	if !tf.CopyRequestHeaders() {
		h := make(http.Header, forwarded.Headers+2)
		for _, k := range [...]string{"Connection", "Upgrade", "Te"} {
			if v, ok := out.Header[k]; ok {
				h[k] = v
			}
		}
		out.Header = h
	}
	// The direct path's outgoing request is the state's own: its header
	// lives no longer than the request, so its values may be the state's.
	var vals *[forwarded.Headers]string
	clean := false
	if out == &st.outReq {
		vals = &st.own.vals
		clean = st.fwdClean // the direct path's copy left out what Set drops
	}
	aside := st.aside && out == &st.outReq
	if aside {
		forwarded.SetAside(in, out.Header, &st.client, st.route.underscore, vals, clean)
	} else {
		forwarded.Set(in, out.Header, &st.client, st.route.fwd, st.route.underscore, vals, clean)
	}
	d := st.dest
	switch {
	case tf.OriginalHost():
		out.Host = in.Host
	case d.Host != "":
		out.Host = d.Host
	default:
		out.Host = "" // the transport sends URL.Host
	}
	tf.ApplyRequest(in, out, src)
	if aside {
		// The client's Tracestate was copied only when setTrace would
		// keep it (direct).
		st.own.fields[forwarded.Headers].Values = st.trace.header
		st.owned = true
	} else {
		setTrace(in, out.Header, st)
	}
	target := d.Address
	u := out.URL
	u.Scheme, u.Host = target.Scheme, target.Host
	if target.RawPath != "" || u.RawPath != "" {
		u.RawPath = joinPath(target.EscapedPath(), u.EscapedPath())
	}
	u.Path = joinPath(target.Path, u.Path)
	switch {
	case target.RawQuery == "":
	case u.RawQuery == "":
		u.RawQuery = target.RawQuery
	default:
		u.RawQuery = target.RawQuery + "&" + u.RawQuery
	}
	st.route.aff.RewriteRequest(in, out, d, st.dec)
	if hk := p.opts.hooks; hk != nil && hk.onRewrite != nil {
		hk.onRewrite(out)
	}
}

// joinPath joins a destination's base path and a request path with exactly
// one slash between them.
func joinPath(base, p string) string {
	if base == "" || base == "/" {
		if p == "" {
			return "/"
		}
		return p
	}
	bs, ps := strings.HasSuffix(base, "/"), strings.HasPrefix(p, "/")
	switch {
	case bs && ps:
		return base + p[1:]
	case !bs && !ps && p != "":
		return base + "/" + p
	}
	return base + p
}

// modifyResponse applies affinity, response transforms and passive health
// to a backend response.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	p.modifyResponseState(stateFrom(resp.Request.Context()), resp)
	return nil
}

// modifyResponseState is modifyResponse for st, the request's state.
func (p *Proxy) modifyResponseState(st *reqState, resp *http.Response) {
	st.upstream = resp.StatusCode
	if resp.StatusCode == http.StatusSwitchingProtocols {
		routetimeout.Stop(resp.Request.Context())
	}
	// Transforms first, as YARP runs its affinity transform after the
	// route's: the affinity cookie survives ResponseHeadersCopy=false.
	st.route.tf.ApplyResponse(resp)
	if hk := p.opts.hooks; hk != nil && hk.onResponse != nil {
		hk.onResponse(resp)
	}
	keepTrailers(resp)
	st.route.aff.Affinitize(resp, st.dest, st.dec, st.client.Proto == "https")
	st.traceVal[0] = st.client.TraceID
	if !st.traceAside {
		resp.Header[forwarded.TraceKey] = st.traceVal[:1:1] // an append copies
	}
	if st.cluster.passive != nil {
		p.reportPassive(resp, st)
	}
	st.waf.InspectResponse(resp)
}

// errorHandler maps a failed round trip to 502, 504 or 413; a client that
// went away gets nothing.
func (p *Proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	st := stateFrom(r.Context())
	status, kind := classify(r.Context(), err)
	if st.body != nil && kind != kindBodyTooLarge {
		// The backend failed because the client's body did: the client's
		// fault. A stalled upload cancels the request context too, but that
		// client is still there and gets its 408.
		switch st.body.state.Load() {
		case bodyFailed:
			if kind != kindClientGone {
				status, kind = http.StatusBadRequest, kindBadRequest
			}
		case bodyTimedOut, bodyTooSlow:
			status, kind = http.StatusRequestTimeout, kindClientTimeout
		}
	}
	st.kind = kind
	if kind == kindClientGone {
		return
	}
	if kind.backendFault() && st.cluster.passive != nil {
		st.cluster.passive.Report(st.dest, p.now(), err, 0)
	}
	st.cluster.errCount[kind].Inc()
	logProxyError(p.logger, r, st, kind, status, err)
	if st.rw.wrote || st.upstream == http.StatusSwitchingProtocols {
		return // the response (or the hijacked connection) has started
	}
	st.route.tf.ApplyError(w.Header(), status)
	writeKindError(w, status, kind, st.client.TraceID)
}

// respWriter records status and size. Hijack, Flush and the rest reach the
// real writer through Unwrap (http.ResponseController).
type respWriter struct {
	w      http.ResponseWriter
	status int
	bytes  int64
	wrote  bool
	// upload, when the request has a body, hears of response activity.
	upload *clientBody
	// grpc: the request is gRPC, so tether's own errors are gRPC statuses.
	grpc bool

	// rate is Limits.MinResponseDataRate. While a write to the client is in
	// progress, wdue is when it must be done by (monotime; 0 between
	// writes); wlast is the last write's, which a write queued behind it
	// adds to. slow: the heartbeat cut the response (rate.go), whose
	// clock a write reads.
	rate      dataRate
	wdue      atomic.Int64
	wlast     int64
	slow      atomic.Bool
	heartbeat *rateWatch
}

func (rw *respWriter) Header() http.Header { return rw.w.Header() }

func (rw *respWriter) WriteHeader(code int) {
	if rw.rate.on() {
		// A server may send the head at once (the own HTTP/1.1 loop does
		// when nothing written later can change it, and a head larger than
		// its buffer reaches the socket here): watched as a write.
		if rw.slow.Load() {
			return
		}
		rw.beginWrite(0)
		defer rw.wdue.Store(0)
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		rw.w.WriteHeader(code) // 1xx informational: not the final status
		return
	}
	if !rw.wrote {
		rw.wrote, rw.status = true, code
		rw.closeIfUploading(code)
	}
	rw.w.WriteHeader(code)
}

func (rw *respWriter) closeIfUploading(code int) {
	if rw.upload != nil && code != http.StatusSwitchingProtocols && rw.upload.mustClose() {
		rw.w.Header()["Connection"] = []string{"close"}
	}
}

func (rw *respWriter) Write(b []byte) (int, error) {
	if !rw.wrote {
		rw.wrote, rw.status = true, http.StatusOK
		rw.closeIfUploading(http.StatusOK)
	}
	if rw.upload != nil {
		rw.upload.touch()
	}
	if !rw.rate.on() {
		n, err := rw.w.Write(b)
		rw.bytes += int64(n)
		return n, err
	}
	if rw.slow.Load() {
		return 0, errResponseTooSlow
	}
	rw.beginWrite(len(b))
	n, err := rw.w.Write(b)
	rw.wdue.Store(0)
	rw.bytes += int64(n)
	return n, err
}

// errResponseTooSlow is a write to a client found too slow to read.
var errResponseTooSlow = errors.New("client slower than the minimum response data rate")

// FlushError lets http.ResponseController flush without unwrapping.
func (rw *respWriter) FlushError() error {
	if rw.rate.on() {
		if rw.slow.Load() {
			return errResponseTooSlow
		}
		rw.beginWrite(0)
		defer rw.wdue.Store(0)
	}
	switch f := rw.w.(type) {
	case interface{ FlushError() error }:
		return f.FlushError()
	case http.Flusher:
		f.Flush()
		return nil
	}
	return http.NewResponseController(rw.w).Flush()
}

// Flush implements http.Flusher for handlers that assert it.
func (rw *respWriter) Flush() { _ = rw.FlushError() }

func (rw *respWriter) Unwrap() http.ResponseWriter { return rw.w }

// bufferPool shares copy buffers between every cluster's ReverseProxy
// and the direct path: 32 KiB ones, and 64 KiB ones that the direct path
// takes for a body known to be longer than 32 KiB (one read and one write
// where the smaller buffer needs two each; held only while such a body is
// copied, so a stream of unknown length, an event stream, never pins one).
type bufferPool struct{ p, large sync.Pool }

const (
	copyBufferSize  = 32 << 10
	largeBufferSize = 64 << 10
)

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[copyBufferSize]byte); ok {
		return v[:]
	}
	return new([copyBufferSize]byte)[:]
}

// getFor is a buffer for copying a body of length n (-1: unknown).
func (b *bufferPool) getFor(n int64) []byte {
	if n <= copyBufferSize {
		return b.Get()
	}
	if v, ok := b.large.Get().(*[largeBufferSize]byte); ok {
		return v[:]
	}
	return new([largeBufferSize]byte)[:]
}

// Put keeps buf as the pointer to its array: putting a *[]byte would
// allocate the slice header on every request.
func (b *bufferPool) Put(buf []byte) {
	switch cap(buf) {
	case copyBufferSize:
		b.p.Put((*[copyBufferSize]byte)(buf[:copyBufferSize]))
	case largeBufferSize:
		b.large.Put((*[largeBufferSize]byte)(buf[:largeBufferSize]))
	}
}

// Interface guards.
var (
	_ http.ResponseWriter  = (*respWriter)(nil)
	_ http.Flusher         = (*respWriter)(nil)
	_ httputil.BufferPool  = (*bufferPool)(nil)
	_ prometheus.Collector = (*stateCollector)(nil)
	_ affinity.Keyring     = compileKeyring{}
)

// keepTrailers lets a response's trailers reach an HTTP/1 client. An
// HTTP/2 backend may send Content-Length together with trailers (Go's own
// HTTP/2 server does for short bodies); copied to an HTTP/1 client that
// length rules out chunked encoding, and with it the trailers, which
// ReverseProxy then drops (gRPC status, checksums). Without the length the
// client gets a chunked body and the trailers; HTTP/2 clients see no
// difference. Runs after the trailer transforms declared what is sent.
func keepTrailers(resp *http.Response) {
	if len(resp.Trailer) == 0 || resp.StatusCode == http.StatusSwitchingProtocols {
		return
	}
	delete(resp.Header, "Content-Length")
	resp.ContentLength = -1
}

// logAccess writes one line per request (its trace_id is the request's
// X-Tether-Trace-Id: proxy/DESIGN.md, "Forwarded headers and trust"). The
// line's time is end, the request's (the clock read once for both); its
// route, cluster and destination are the labels of stats, its series.
func (p *Proxy) logAccess(r *http.Request, st *reqState, stats *destStats, status int, end time.Time, dur time.Duration) {
	aff, affIdx := "disabled", 0
	if st.route != nil && st.route.aff != nil {
		aff, affIdx = st.dec.Outcome.String(), 1+int(st.dec.Outcome)
	}
	if al := p.fastAccess; al != nil {
		// The same line slog's JSONHandler writes (15 attributes), encoded
		// without building a slog.Record.
		al.WriteLine(end, accesslog.Line{
			TraceID: st.client.TraceID, SpanID: spanID(st), Remote: st.client.Host, Method: r.Method,
			Host: r.Host, Path: r.URL.Path, Status: status, Bytes: st.rw.bytes,
			DurationMs: float64(dur.Microseconds()) / 1000, Route: stats.labels[0], Cluster: stats.labels[1],
			Destination: stats.labels[2], Affinity: aff, Aborted: st.aborted, Target: stats.lines.Get(affIdx, aff),
		})
		return
	}
	p.access.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("trace_id", st.client.TraceID), slog.String("span_id", spanID(st)),
		slog.String("remote", st.client.Host), slog.String("method", r.Method),
		slog.String("host", r.Host), slog.String("path", r.URL.Path),
		slog.Int("status", status), slog.Int64("bytes", st.rw.bytes),
		slog.Float64("duration_ms", float64(dur.Microseconds())/1000),
		slog.String("route", stats.labels[0]), slog.String("cluster", stats.labels[1]),
		slog.String("destination", stats.labels[2]), slog.String("affinity", aff),
		slog.Bool("aborted", st.aborted))
}

// spanID is tether's own span id for the request (the parent-id of the
// traceparent it sent the backend).
func spanID(st *reqState) string {
	if tp := st.trace.parent(); len(tp) >= 52 {
		return tp[36:52]
	}
	return ""
}
