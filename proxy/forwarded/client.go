package forwarded

import (
	"net/http"
	"strings"
)

// Client is what the data path learnt of a request's client from its
// connection and, when the peer is trusted, from the forwarding headers.
type Client struct {
	Host    string // the immediate peer's address (HostOf RemoteAddr)
	Trusted bool   // the peer is in TrustedProxies
	Proto   string // the client's scheme (ClientProto)
	TraceID string // the request's trace id (TraceHeader)
}

// Address is the client address that deterministic redistribution mixes
// into the hash policies' input (affinity.ResolveClient), the same for one
// client on every node: behind a trusted proxy (TrustedProxies) the last
// X-Forwarded-For entry of r, the address that proxy saw; otherwise the
// immediate peer. It allocates nothing.
func (c *Client) Address(r *http.Request) string {
	if c.Trusted {
		if vs := r.Header[XFF]; len(vs) > 0 {
			last := vs[len(vs)-1]
			if i := strings.LastIndexByte(last, ','); i >= 0 {
				last = last[i+1:]
			}
			if v := strings.TrimSpace(last); v != "" {
				return v
			}
		}
	}
	return c.Host
}
