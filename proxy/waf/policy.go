package waf

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/corazawaf/coraza/v3/experimental"
	"github.com/corazawaf/coraza/v3/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/proxy/config"
)

// Policy is one route's compiled WAF setting. A nil *Policy is a route
// without WAF: callers test for nil and do nothing else.
type Policy struct {
	fw      *Firewall
	route   string
	prevent bool
	// remove are the rules excluded on this route only.
	remove []config.WafRuleRange
	counts [numActions]prometheus.Counter
}

// Policy returns route r's policy under cfg, or nil when the WAF is off for
// it (or f is nil).
func (f *Firewall) Policy(cfg *config.Config, r *config.Route) *Policy {
	if f == nil {
		return nil
	}
	mode := cfg.WafMode(r)
	if mode != "Detection" && mode != "Prevention" {
		return nil
	}
	p := &Policy{fw: f, route: r.RouteId, prevent: mode == "Prevention"}
	for _, e := range cfg.Waf.Exclusions {
		for _, rid := range e.Routes {
			if rid != r.RouteId {
				continue
			}
			for _, s := range e.RuleIds {
				if rr, err := config.ParseWafRuleIDs(s); err == nil {
					p.remove = append(p.remove, rr)
				}
			}
		}
	}
	p.counts = f.metrics.actionCounters(r.RouteId)
	return p
}

// Mode is "Detection" or "Prevention".
func (p *Policy) Mode() string {
	if p.prevent {
		return "Prevention"
	}
	return "Detection"
}

// action is what the WAF did with a request.
type action uint8

const (
	actAllowed  action = iota // no threat found
	actDetected               // a threat, forwarded (Detection mode)
	actBlocked                // a threat, answered by tether (Prevention)
	numActions
)

var actionNames = [numActions]string{"allowed", "detected", "blocked"}

// Tx is the WAF's state for one request, from Check to Done.
type Tx struct {
	p       *Policy
	tx      txControl
	traceID string
	act     action
	// reason is set when tether (not a rule) flagged the request.
	reason string
	status int
	// refs: Done and, when the body was handed on, its Close: the
	// transport may still read the buffered body after the handler
	// returned, so the Coraza transaction is closed by whichever is last.
	refs atomic.Int32
}

// Check runs the request phases (headers, then the body up to the limit)
// for r. It returns the transaction (always: the caller must call Done
// once the request is over), the body to forward in place of body, and
// whether the request was answered (blocked) and must not be proxied.
// A body that fails to read is handed on failing, so the data path answers
// it as it answers any failed upload.
func (p *Policy) Check(w http.ResponseWriter, r *http.Request, body io.ReadCloser, traceID string) (*Tx, io.ReadCloser, bool) {
	raw := p.fw.waf.(experimental.WAFWithOptions).NewTransactionWithOptions(experimental.Options{ID: traceID, Context: r.Context()})
	tx := raw.(txControl) // checked when the Firewall was built
	t := &Tx{p: p, tx: tx, traceID: traceID}
	t.refs.Store(1)
	for _, rr := range p.remove {
		if rr.First == rr.Last {
			tx.RemoveRuleByID(rr.First)
		} else {
			tx.RemoveRuleByIDRange(rr.First, rr.Last)
		}
	}
	client, cport := splitAddr(r.RemoteAddr)
	var server string
	var sport int
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		server, sport = splitAddr(la.String())
	}
	tx.ProcessConnection(client, cport, server, sport)
	uri := r.RequestURI
	if uri == "" {
		uri = r.URL.RequestURI()
	}
	tx.ProcessURI(uri, r.Method, r.Proto)
	for k, vs := range r.Header {
		for _, v := range vs {
			tx.AddRequestHeader(k, v)
		}
	}
	// net/http moves Host and Transfer-Encoding out of the header map;
	// CRS checks both (920280, 920171, smuggling rules).
	if r.Host != "" {
		tx.AddRequestHeader("Host", r.Host)
		tx.SetServerName(hostOnly(r.Host))
	}
	for _, te := range r.TransferEncoding {
		tx.AddRequestHeader("Transfer-Encoding", te)
	}
	tx.ProcessRequestHeaders()
	if t.decide(w) {
		return t, body, true
	}

	hasBody := body != nil && body != http.NoBody
	if hasBody && tx.IsRequestBodyAccessible() {
		_, n, err := tx.ReadRequestBodyFrom(body)
		if err != nil {
			// The client's upload failed (timeout, too large for the
			// route, gone): forward nothing of it, let the round trip fail
			// with the client's error.
			t.reason = "request_body_error"
			return t, failingBody{err: err, c: body}, false
		}
		var extra []byte
		if int64(n) >= p.fw.bodyLimit {
			// At the limit: is there more? One byte tells.
			var b [1]byte
			m, rerr := io.ReadFull(body, b[:])
			if m == 1 {
				extra = b[:1]
				t.reason = "request_body_limit"
				switch {
				case p.fw.reject && p.prevent:
					t.act, t.status = actBlocked, http.StatusRequestEntityTooLarge
					writeBlocked(w, t.status, traceID, false)
					return t, body, true
				case p.fw.reject:
					t.act = actDetected
				}
			} else if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, io.ErrUnexpectedEOF) {
				t.reason = "request_body_error"
				return t, failingBody{err: rerr, c: body}, false
			}
		}
		tx.ProcessRequestBody()
		if t.decide(w) {
			return t, body, true
		}
		rbr, err := tx.RequestBodyReader()
		if err != nil {
			return t, failingBody{err: err, c: body}, false
		}
		t.refs.Add(1)
		rs := []io.Reader{rbr}
		if extra != nil {
			rs = append(rs, strings.NewReader(string(extra)))
		}
		return t, &forwardBody{Reader: io.MultiReader(append(rs, body)...), body: body, t: t}, false
	}
	tx.ProcessRequestBody()
	if t.decide(w) {
		return t, body, true
	}
	return t, body, false
}

// decide applies the request's verdict so far: an interruption Coraza
// made itself (a rule switched the engine on) always blocks; the one it
// would have made blocks in Prevention and is recorded in Detection.
func (t *Tx) decide(w http.ResponseWriter) bool {
	it := t.tx.Interruption()
	if it == nil {
		it = t.tx.DetectionOnlyInterruption()
		if it == nil {
			return false
		}
		if !t.p.prevent {
			t.act = actDetected
			return false
		}
	}
	t.act = actBlocked
	t.answer(w, it)
	return true
}

// answer writes the interruption's response: 403 (or the rule's own 4xx
// or 5xx status), or the redirect a rule asked for.
func (t *Tx) answer(w http.ResponseWriter, it *types.Interruption) {
	if it.Action == "redirect" && it.Data != "" {
		t.status = http.StatusFound
		w.Header()["Location"] = []string{it.Data}
		w.Header()[hdrTraceID] = []string{t.traceID}
		w.WriteHeader(t.status)
		return
	}
	t.status = it.Status
	if t.status < 400 || t.status > 599 {
		t.status = http.StatusForbidden
	}
	writeBlocked(w, t.status, t.traceID, it.Action == "drop")
}

// hdrTraceID is the data path's trace id header (proxy/DESIGN.md,
// "Forwarded headers and trust").
const hdrTraceID = "X-Tether-Trace-Id"

// writeBlocked answers a blocked request. The body names the transaction
// (trace) id to quote to the operator, never the rule that matched.
func writeBlocked(w http.ResponseWriter, status int, traceID string, closeConn bool) {
	h := w.Header()
	h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	h["Cache-Control"] = []string{"no-store"}
	h[hdrTraceID] = []string{traceID}
	if closeConn {
		h["Connection"] = []string{"close"}
	}
	w.WriteHeader(status)
	msg := "request blocked by the web application firewall"
	if status == http.StatusRequestEntityTooLarge {
		msg = "request body too large for the web application firewall"
	}
	_, _ = io.WriteString(w, msg+"\ntransaction id: "+traceID+"\n")
}

// Blocked reports whether the WAF answered the request itself.
func (t *Tx) Blocked() bool { return t != nil && t.act == actBlocked }

// release closes the Coraza transaction once its last holder is done.
func (t *Tx) release() {
	if t.refs.Add(-1) == 0 {
		_ = t.tx.Close()
	}
}

// forwardBody is the inspected prefix of a body followed by the rest.
type forwardBody struct {
	io.Reader
	body   io.Closer
	t      *Tx
	closed atomic.Bool
}

func (b *forwardBody) Close() error {
	err := b.body.Close()
	if b.closed.CompareAndSwap(false, true) {
		b.t.release()
	}
	return err
}

// failingBody hands a client's failed upload on: every read fails with it.
type failingBody struct {
	err error
	c   io.Closer
}

func (b failingBody) Read([]byte) (int, error) { return 0, b.err }
func (b failingBody) Close() error             { return b.c.Close() }

func splitAddr(s string) (string, int) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().String(), int(ap.Port())
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		return s, 0
	}
	return host, 0
}

func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

var (
	_ io.ReadCloser = (*forwardBody)(nil)
	_ io.ReadCloser = failingBody{}
)
