package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/tether-proxy/tether/proxy/health"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// Nothing a request does waits without a bound: this file bounds the wait
// for a connection slot, the size of a backend's response headers, and
// makes a backend that fails in the middle of a body count against it.

// maxResponseHeaderBytes caps a backend's response header block (as
// SocketsHttpHandler's MaxResponseHeadersLength does, 64 KiB); a larger one
// is a 502 instead of memory spent without limit.
const maxResponseHeaderBytes = 64 << 10

// errNoConnSlot cancels a request that waited its cluster's
// HttpRequest.Timeout for one of MaxConnectionsPerServer connections.
var errNoConnSlot = errors.New("no connection slot within the cluster's HttpRequest timeout")

// boundSlotWait returns ctx bounded so that, while it waits for a backend
// connection, it gives up after wait with errNoConnSlot as its cause. Once
// the request has a connection, or dials one of its own (a slot was free;
// dialing has its own timeouts), the bound no longer applies. stop must be
// called when the request ends.
func boundSlotWait(ctx context.Context, wait time.Duration) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	timer := time.AfterFunc(wait, func() { cancel(errNoConnSlot) })
	release := func() { timer.Stop() }
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn:      func(httptrace.GotConnInfo) { release() },
		ConnectStart: func(string, string) { release() },
	})
	return ctx, func() {
		timer.Stop()
		cancel(nil)
	}
}

// watchedBody defers the passive health report of a response with a body
// to the end of that body, so that a backend that dies in the middle of it
// (reset, truncated, idle past ActivityTimeout) counts as a failure, while
// a client that went away does not count against the backend.
type watchedBody struct {
	rc      io.ReadCloser
	ctx     context.Context // the client request's
	passive *health.Passive
	dest    *upstream.Destination
	now     func() time.Time
	status  int
	once    sync.Once
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	switch {
	case err == nil:
	case err == io.EOF:
		b.report(nil)
	case b.ctx.Err() != nil:
		b.report(nil) // the client left; the transport cut the body
	default:
		b.report(err)
	}
	return n, err
}

// Close ends the body; a body not read to its end was given up by the
// client (or the handler), not failed by the backend.
func (b *watchedBody) Close() error {
	b.report(nil)
	return b.rc.Close()
}

func (b *watchedBody) report(err error) {
	b.once.Do(func() { b.passive.Report(b.dest, b.now(), err, b.status) })
}

// reportPassive reports a backend response to passive health: at once when
// it has no body to wait for (or is already a failure), else when its body
// ends.
func (p *Proxy) reportPassive(resp *http.Response, st *reqState) {
	pa := st.cluster.passive
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusSwitchingProtocols ||
		resp.Body == nil || resp.Body == http.NoBody {
		pa.Report(st.dest, p.now(), nil, resp.StatusCode)
		return
	}
	resp.Body = &watchedBody{rc: resp.Body, ctx: resp.Request.Context(), passive: pa,
		dest: st.dest, now: p.now, status: resp.StatusCode}
}

// tuneTransport applies what the data path bounds, the marking of dial
// errors for the retry, and the cluster's backend TLS settings to a new
// transport.
func tuneTransport(tr *http.Transport, cl *clusterRT) {
	tr.MaxResponseHeaderBytes = maxResponseHeaderBytes
	markDialErrors(tr) // before the TLS dialer wraps it: handshake errors are not retried
	setBackendTLS(tr, cl)
}
