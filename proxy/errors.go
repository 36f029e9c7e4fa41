package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
)

// errKind labels tether_proxy_errors_total{kind}.
type errKind uint8

const (
	kindNone errKind = iota
	kindNoRoute
	kindNoHealthy
	kindBadGateway
	kindGatewayTimeout
	kindAffinityClosed
	kindBodyTooLarge
	kindBadRequest
	kindClientTimeout
	numKinds
	// kindClientGone is not counted as a proxy error: the client left.
	kindClientGone
)

var kindNames = [numKinds]string{
	kindNone:           "",
	kindNoRoute:        "no_route",
	kindNoHealthy:      "no_healthy",
	kindBadGateway:     "bad_gateway",
	kindGatewayTimeout: "gateway_timeout",
	kindAffinityClosed: "affinity_failed_closed",
	kindBodyTooLarge:   "body_too_large",
	kindBadRequest:     "bad_request",
	kindClientTimeout:  "client_timeout",
}

// backendFault reports whether an error of this kind is the destination's
// fault, and so feeds passive health. Client mistakes never are.
func (k errKind) backendFault() bool {
	return k == kindBadGateway || k == kindGatewayTimeout
}

// statusClientClosed is logged (never sent) when the client went away
// before the backend answered, as nginx's 499.
const statusClientClosed = 499

// classify maps a transport error to the status tether answers. ctx is the
// client request's context: a cancelled one means the client left.
func classify(ctx context.Context, err error) (int, errKind) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge, kindBodyTooLarge
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return statusClientClosed, kindClientGone
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout, kindGatewayTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return http.StatusGatewayTimeout, kindGatewayTimeout
	}
	return http.StatusBadGateway, kindBadGateway
}

// errorBody is the fixed text answered for a status: never an address, an
// error string or a stack trace (SPEC §2.1).
func errorBody(status int) string {
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

// writeError answers status with its fixed body and the trace id.
func writeError(w http.ResponseWriter, status int, traceID string) {
	h := w.Header()
	h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	if traceID != "" {
		h[hdrTraceID] = []string{traceID}
	}
	body := errorBody(status)
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}
