package errpage

import (
	"net/http"
	"strconv"

	"github.com/tether-proxy/tether/proxy/forwarded"
)

// Body is the fixed text answered for a status: never an address, an
// error string or a stack trace (proxy/DESIGN.md, "Errors").
func Body(status int) string {
	switch status {
	case http.StatusNotFound:
		return "no route\n"
	case http.StatusBadGateway:
		return "bad gateway\n"
	case http.StatusGatewayTimeout:
		return "gateway timeout\n"
	case http.StatusServiceUnavailable:
		return "no healthy destination\n"
	case http.StatusRequestEntityTooLarge:
		return "request body too large\n"
	}
	if t := http.StatusText(status); t != "" {
		return t + "\n"
	}
	return "error\n"
}

// Write answers status with body (fixed text, never an error string) and
// the trace id: a plain-text page, or, for a gRPC call (grpc), a
// trailers-only gRPC status (HTTP 200).
func Write(w http.ResponseWriter, status int, body, traceID string, grpc bool) {
	if grpc {
		writeGRPC(w, status, body, traceID)
		return
	}
	h := w.Header()
	h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	if traceID != "" {
		h[forwarded.TraceHeader] = []string{traceID}
	}
	// The length the server would compute, said up front, so that a flush
	// at the handler's end leaves the framing as it was.
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}
