package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"

	"github.com/tether-proxy/tether/proxy/affinity"
	"github.com/tether-proxy/tether/proxy/errpage"
	"github.com/tether-proxy/tether/proxy/forwarded"
	"github.com/tether-proxy/tether/proxy/routetimeout"
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
	kindConnLimit
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
	kindConnLimit:      "connection_limit",
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
	if errors.Is(context.Cause(ctx), errNoConnSlot) {
		// Waited HttpRequest.Timeout for one of MaxConnectionsPerServer
		// connections: tether's own limit, not the backend's failure.
		return http.StatusServiceUnavailable, kindConnLimit
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return statusClientClosed, kindClientGone
	}
	if errors.Is(err, context.DeadlineExceeded) || routetimeout.TimedOut(ctx) {
		return http.StatusGatewayTimeout, kindGatewayTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return http.StatusGatewayTimeout, kindGatewayTimeout
	}
	return http.StatusBadGateway, kindBadGateway
}

// writeError answers status with its fixed body and the trace id.
func writeError(w http.ResponseWriter, status int, traceID string) {
	writeErrorBody(w, status, errpage.Body(status), traceID)
}

// writeKindError is writeError for a failed round trip, whose kind may have
// a body of its own: a connection-limit 503 is not "no healthy destination".
func writeKindError(w http.ResponseWriter, status int, kind errKind, traceID string) {
	if kind == kindConnLimit {
		writeErrorBody(w, status, "no backend connection available\n", traceID)
		return
	}
	writeError(w, status, traceID)
}

// writeErrorBody answers status with body (errpage.Write), as a gRPC
// status when the request is a gRPC call.
func writeErrorBody(w http.ResponseWriter, status int, body, traceID string) {
	rw, _ := w.(*respWriter)
	grpc := rw != nil && rw.grpc
	errpage.Write(w, status, body, traceID, grpc)
	if grpc {
		// Metrics and the access log keep the HTTP status tether would
		// have answered: a gRPC failure is not counted as a success.
		rw.status = status
	}
}

// clientFault reports whether an error of this kind is the client's doing
// (a broken or oversized body, a stalled upload): not a proxy error.
func (k errKind) clientFault() bool {
	return k == kindBadRequest || k == kindClientTimeout || k == kindBodyTooLarge || k == kindClientGone
}

// logProxyError logs a failed round trip: a warning when the backend or
// tether failed, a debug line when the client did (its mistakes are
// counted in tether_proxy_errors_total but would otherwise flood the log
// with "errors" an operator can do nothing about).
func logProxyError(l *slog.Logger, r *http.Request, st *reqState, kind errKind, status int, err error) {
	level, msg := slog.LevelWarn, "proxy error"
	if kind.clientFault() {
		level, msg = slog.LevelDebug, "client error"
	}
	if !l.Enabled(r.Context(), level) {
		return
	}
	l.LogAttrs(r.Context(), level, msg,
		slog.String("trace_id", st.client.TraceID), slog.String("cluster", st.cluster.id),
		slog.String("destination", st.dest.ID), slog.Int("status", status), slog.String("err", err.Error()))
}

// failAffinity answers a Return503Error refusal: FailureStatusCode with
// affinity's own body (not the "no healthy destination" of a 503).
func (p *Proxy) failAffinity(st *reqState, status int) {
	st.kind = kindAffinityClosed
	st.cluster.errCount[kindAffinityClosed].Inc()
	h := st.rw.Header()
	st.route.tf.ApplyError(h, status) // as on tether's other errors
	h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	if st.client.TraceID != "" {
		h[forwarded.TraceHeader] = []string{st.client.TraceID}
	}
	st.rw.WriteHeader(status)
	_, _ = io.WriteString(&st.rw, affinity.RefusalBody)
}
