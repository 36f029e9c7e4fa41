package proxy

import (
	"net/http"
	"strings"
)

// affinityClient is the client address that deterministic redistribution
// mixes into the hash policies' input (affinity.ResolveClient), the same
// for one client on every node: behind a trusted proxy (TrustedProxies)
// the last X-Forwarded-For entry, the address that proxy saw; otherwise
// the immediate peer. It allocates nothing.
func affinityClient(r *http.Request, st *reqState) string {
	if st.trusted {
		if vs := r.Header[hdrXFF]; len(vs) > 0 {
			last := vs[len(vs)-1]
			if i := strings.LastIndexByte(last, ','); i >= 0 {
				last = last[i+1:]
			}
			if v := strings.TrimSpace(last); v != "" {
				return v
			}
		}
	}
	return st.clientHost
}
