package upstream

import (
	"context"
	"fmt"
	"net"
	"time"
)

// ConnectTimeout bounds one connection attempt to a destination: the name
// lookup (from the DNS cache, so usually none) and the TCP connect, to each
// of the name's addresses in turn, together. A destination that does not
// answer a SYN at all (a killed container, a lost machine: its packets are
// dropped, nothing refuses them) is a connect failure after ConnectTimeout,
// and the request is retried on another destination (proxy/DESIGN.md, "One
// retry") while a client still waits for it: two attempts, 4 s, fit in a 5 s
// client timeout with room for the response.
//
// 2 s lets a connect survive one lost SYN (Linux retransmits it after
// 1 s) on any network a proxy and its backends share; a slower connect is
// treated as a dead destination. It is a constant: YARP's HttpClient
// section has no connect timeout (.NET's SocketsHttpHandler.ConnectTimeout
// is not exposed) and tether adds no key for it. The TLS handshake that
// follows has its own bound (the transport's TLSHandshakeTimeout).
const ConnectTimeout = 2 * time.Second

// WithConnectTimeout returns dial with every call bounded by d (d <= 0:
// dial itself). A call cut by the bound fails with an error that names the
// bound and is a net.Error whose Timeout is true.
func WithConnectTimeout(dial DialFunc, d time.Duration) DialFunc {
	if d <= 0 {
		return dial
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		c, err := dial(cctx, network, addr)
		if err != nil && ctx.Err() == nil && cctx.Err() != nil {
			// Our bound, not the caller's, cut it.
			return nil, &connectTimeoutError{addr: addr, d: d, err: err}
		}
		return c, err
	}
}

// connectTimeoutError is a connect cut by ConnectTimeout.
type connectTimeoutError struct {
	addr string
	d    time.Duration
	err  error
}

func (e *connectTimeoutError) Error() string {
	return fmt.Sprintf("connect to %s: no answer within the connect timeout (%v): %v", e.addr, e.d, e.err)
}

func (e *connectTimeoutError) Unwrap() error   { return e.err }
func (e *connectTimeoutError) Timeout() bool   { return true }
func (e *connectTimeoutError) Temporary() bool { return true }

var _ net.Error = (*connectTimeoutError)(nil)
