package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/tether-proxy/tether/proxy/affinity"
	"github.com/tether-proxy/tether/proxy/lean"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// DESIGN.md, "One retry": a request whose connection to its destination
// failed before any byte was sent (refused, reset on connect, dial timeout, a
// name that does not resolve) is retried once on another healthy destination,
// within its own timeout, whatever its method: the backend never saw it. A
// body-less GET, HEAD, OPTIONS or TRACE whose connection broke before any
// response is retried the same way (retryable). A dial that gets no answer is
// cut after upstream.ConnectTimeout (2 s), so the retry happens while the
// client still waits.

// dialError marks an error of the TCP dial (DNS included), before anything
// was written; TLS handshake errors are not marked.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// ConnectFailure tells passive health (health.IsConnectFailure) that the
// destination could not be reached at all.
func (e *dialError) ConnectFailure() bool { return true }

// markDialErrors wraps tr's dialer so its failures are known as such, and
// bounds each dial by upstream.ConnectTimeout: without it a destination
// that drops SYNs (a killed container's address) holds a request for the
// dialer's own timeout (5 s in proxy/dnscache, minutes in the kernel), past
// the point where a retry could still answer the client.
func markDialErrors(tr *http.Transport) {
	if tr.DialContext == nil {
		return
	}
	dial := upstream.WithConnectTimeout(tr.DialContext, upstream.ConnectTimeout)
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, &dialError{err}
		}
		return c, nil
	}
}

// retryTransport is a cluster's ReverseProxy transport.
type retryTransport struct {
	base http.RoundTripper
	// lean is base when it is the lean transport (nil otherwise): the
	// direct path's requests go through its RoundTripDirect.
	lean *lean.Transport
	p    *Proxy
}

// keepOpen lets a first attempt's transport close the request body on
// failure without closing it for the retry. ReverseProxy closes the real
// body when the request ends.
type keepOpen struct{ io.ReadCloser }

func (keepOpen) Close() error { return nil }

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.roundTrip(req, stateFrom(req.Context()))
}

// roundTrip is RoundTrip with req's state, nil when it has none: the
// direct path, which holds it, spares the context's look-up.
func (t *retryTransport) roundTrip(req *http.Request, st *reqState) (*http.Response, error) {
	body := req.Body
	if st != nil && body != nil && body != http.NoBody {
		// ReverseProxy's deferred Close already holds the real body.
		req.Body = keepOpen{body}
	}
	var resp *http.Response
	var err error
	if st != nil && st.directOut == req {
		resp, err = t.lean.RoundTripDirect(req, &st.direct)
	} else {
		resp, err = t.base.RoundTrip(req)
	}
	if err == nil || st == nil || req.Context().Err() != nil || !retryable(req, body, err) {
		return resp, err
	}
	failed := st.dest
	next := t.p.retryDestination(st, req)
	if next == nil {
		return nil, err
	}
	if pa := st.cluster.passive; pa != nil {
		pa.Report(failed, t.p.now(), err, 0)
	}
	if st.directOut == req {
		st.ownFields() // the clone's head is written from its map
	}
	again := req.Clone(req.Context())
	again.Body = body
	retarget(again, failed, next, st.route.tf.OriginalHost())
	next.Begin()
	st.dest = next // the response, metrics and the access log are next's
	if st.directOut != nil {
		resp, err = t.lean.RetryDirect(again, &st.direct)
	} else {
		resp, err = t.base.RoundTrip(again)
	}
	if err != nil {
		next.Done()
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols || resp.Body == nil {
		next.Done()
		return resp, nil
	}
	resp.Body = &doneBody{ReadCloser: resp.Body, done: next.Done}
	return resp, nil
}

// retryable reports whether a first attempt that failed with err may be
// tried once more elsewhere: a connect failure always (the backend never
// saw the request); a connection that broke before any response came back
// (reset, closed) only when the request is safe by its method (GET, HEAD,
// OPTIONS, TRACE: the methods net/http's own retry takes) and has no body
// (RFC 9110 §9.2.2; nginx's proxy_next_upstream does the same by default):
// the backend may have seen it, and doing it again is harmless.
// That covers a backend killed with requests in flight, and a connection
// its kernel had accepted when its listener closed. A timeout is never
// retried: the backend may still be working on it.
func retryable(req *http.Request, body io.ReadCloser, err error) bool {
	var de *dialError
	if errors.As(err, &de) {
		return true
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
	default:
		return false
	}
	if body != nil && body != http.NoBody {
		return false
	}
	if _, ok := req.Header["Upgrade"]; ok {
		return false // an upgrade's bytes after the 101 are not replayable
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return lean.ConnBroke(err) ||
		// net/http's errServerClosedIdle, which it retries itself only on
		// a reused connection.
		strings.Contains(err.Error(), "server closed idle connection")
}

// retryDestination picks the destination for the one retry, other than
// the one that failed (nil when there is none). A request of an affinity
// session first tries the rest of its session's group; when none is left,
// it goes to the session's deterministic replacement (affinity
// Replacement: the destination every node redistributes the session to
// once the failed one is gone), and st.dec becomes that redistribution, so
// the response carries the new key; under Return503Error a session does
// not move and gets no retry (502). Any other request picks among its
// candidates, else the cluster's available destinations.
func (p *Proxy) retryDestination(st *reqState, r *http.Request) *upstream.Destination {
	now := p.now()
	pick := func(from []*upstream.Destination) *upstream.Destination {
		var cands []*upstream.Destination
		for _, d := range from {
			if d != st.dest && d.Healthy(now) {
				cands = append(cands, d)
			}
		}
		switch len(cands) {
		case 0:
			return nil
		case 1:
			return cands[0]
		}
		return st.cluster.lb.Pick(r, cands)
	}
	if d := pick(st.dec.Candidates); d != nil {
		return d
	}
	if aff := st.route.aff; aff != nil && st.dec.Outcome != affinity.NoSession {
		dec := aff.Replacement(st.cluster.up, now, st.dec, st.dest, nil)
		if dec.Status != 0 {
			return nil // Return503Error: the session does not move; 502
		}
		if d := pick(dec.Candidates); d != nil {
			st.dec = dec
			return d
		}
	}
	return pick(st.cluster.up.Available(now))
}

// retarget points a request built for from at to: scheme, host, the base
// path and query of to's address instead of from's (rewrite joined them),
// and the Host header when from's Host setting chose it.
func retarget(r *http.Request, from, to *upstream.Destination, originalHost bool) {
	u, fa, ta := r.URL, from.Address, to.Address
	hadRaw := u.RawPath != ""
	p := unjoinPath(u.Path, fa.Path)
	esc := unjoinPath(u.EscapedPath(), fa.EscapedPath())
	u.Scheme, u.Host = ta.Scheme, ta.Host
	u.Path = joinPath(ta.Path, p)
	u.RawPath = ""
	if hadRaw || ta.RawPath != "" {
		u.RawPath = joinPath(ta.EscapedPath(), esc)
	}
	q := u.RawQuery
	if fa.RawQuery != "" {
		q = strings.TrimPrefix(strings.TrimPrefix(q, fa.RawQuery), "&")
	}
	switch {
	case ta.RawQuery == "":
		u.RawQuery = q
	case q == "":
		u.RawQuery = ta.RawQuery
	default:
		u.RawQuery = ta.RawQuery + "&" + q
	}
	if !originalHost && r.Host == from.Host {
		r.Host = to.Host
	}
}

// unjoinPath undoes joinPath(base, p) up to equivalence: the result joins
// with another base to what joinPath(other, p) gives.
func unjoinPath(joined, base string) string {
	return strings.TrimPrefix(joined, strings.TrimSuffix(base, "/"))
}

// doneBody calls done once, when the response body is closed.
type doneBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *doneBody) Close() error {
	b.once.Do(b.done)
	return b.ReadCloser.Close()
}
