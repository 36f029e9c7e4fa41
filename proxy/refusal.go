package proxy

import (
	"io"

	"github.com/tether-proxy/tether/proxy/affinity"
)

// failAffinity answers a Return503Error refusal: FailureStatusCode with
// affinity's own body (not the "no healthy destination" of a 503).
func (p *Proxy) failAffinity(st *reqState, status int) {
	st.kind = kindAffinityClosed
	st.cluster.errCount[kindAffinityClosed].Inc()
	h := st.rw.Header()
	st.route.tf.ApplyError(h, status) // as on tether's other errors
	h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	if st.traceID != "" {
		h[hdrTraceID] = []string{st.traceID}
	}
	st.rw.WriteHeader(status)
	_, _ = io.WriteString(&st.rw, affinity.RefusalBody)
}
