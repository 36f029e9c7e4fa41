package proxy

import (
	"net/http"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// setBackendTLS gives a new transport the cluster's TLS settings and a TLS
// dialer that sends each destination's server name.
func setBackendTLS(tr *http.Transport, cl *clusterRT) {
	if cl.tls == nil {
		return
	}
	tr.TLSClientConfig = cl.tls.Config.Clone()
	sni := cl.sni
	tr.DialTLSContext = upstream.DialTLS(tr, tr.DialContext, func(addr string) string { return sni[addr] })
}
