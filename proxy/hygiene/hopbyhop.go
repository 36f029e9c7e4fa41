package hygiene

import (
	"net/http"
	"net/textproto"
	"strings"
)

// RemoveHopByHop is ReverseProxy's removeHopByHopHeaders, for a request's
// or a response's fields: the fields the Connection header names, then
// RFC 2616's hop-by-hop list. A small map is walked once (deleting during
// range is allowed) rather than hashed nine times.
func RemoveHopByHop(h http.Header) {
	RemoveConnectionFields(h, h["Connection"])
	if len(h) > 16 {
		for _, k := range [...]string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
			"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"} {
			delete(h, k)
		}
		return
	}
	for k := range h {
		if HopByHop(k) {
			delete(h, k)
		}
	}
}

// RemoveConnectionFields deletes from h the fields conn (the Connection
// field's values) names.
func RemoveConnectionFields(h http.Header, conn []string) {
	for _, f := range conn {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
}

// HopByHop: k is one of RFC 2616's hop-by-hop fields, as ReverseProxy
// lists them.
func HopByHop(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}
