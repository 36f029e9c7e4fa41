package errpage

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/tether-proxy/tether/proxy/forwarded"
)

// gRPC clients read a call's outcome from grpc-status, not from the HTTP
// status, and treat a text/plain answer as a transport failure
// ("unexpected content-type"). So an error tether itself answers to a gRPC
// request is a trailers-only gRPC response: HTTP 200, the status mapped as
// gRPC's own HTTP-to-gRPC table does (a timeout is DEADLINE_EXCEEDED), and
// the fixed error text as grpc-message. gRPC-Web (application/grpc-web)
// frames its status differently and keeps the plain HTTP error.

// IsGRPC reports whether r is a gRPC call (application/grpc, optionally
// with a +codec or parameters).
func IsGRPC(r *http.Request) bool {
	v := r.Header["Content-Type"]
	if len(v) == 0 {
		return false
	}
	ct := v[0]
	if !strings.HasPrefix(ct, "application/grpc") {
		return false
	}
	rest := ct[len("application/grpc"):]
	return rest == "" || rest[0] == '+' || rest[0] == ';'
}

// gRPC status codes (google.golang.org/grpc/codes).
const (
	grpcUnknown           = 2
	grpcDeadlineExceeded  = 4
	grpcPermissionDenied  = 7
	grpcResourceExhausted = 8
	grpcUnimplemented     = 12
	grpcInternal          = 13
	grpcUnavailable       = 14
	grpcUnauthenticated   = 16
)

// grpcStatusOf maps tether's HTTP error status to a gRPC status, following
// gRPC's http-grpc-status-mapping; a timeout (504, 408) is the call's
// deadline.
func grpcStatusOf(status int) int {
	switch status {
	case http.StatusBadRequest:
		return grpcInternal
	case http.StatusUnauthorized:
		return grpcUnauthenticated
	case http.StatusForbidden:
		return grpcPermissionDenied
	case http.StatusNotFound:
		return grpcUnimplemented
	case http.StatusRequestTimeout, http.StatusGatewayTimeout:
		return grpcDeadlineExceeded
	case http.StatusRequestEntityTooLarge:
		return grpcResourceExhausted
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable:
		return grpcUnavailable
	}
	return grpcUnknown
}

// writeGRPC answers a gRPC request with a trailers-only status.
func writeGRPC(w http.ResponseWriter, status int, body, traceID string) {
	h := w.Header()
	h["Content-Type"] = []string{"application/grpc"}
	h["Grpc-Status"] = []string{strconv.Itoa(grpcStatusOf(status))}
	h["Grpc-Message"] = []string{grpcMessage(strings.TrimSuffix(body, "\n"))}
	if traceID != "" {
		h[forwarded.TraceHeader] = []string{traceID}
	}
	w.WriteHeader(http.StatusOK)
}

// grpcMessage percent-encodes what grpc-message may not carry as is
// (anything outside printable ASCII, and '%').
func grpcMessage(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '%' {
			return grpcEscape(s)
		}
	}
	return s
}

func grpcEscape(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
