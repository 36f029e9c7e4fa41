package proxy

import (
	"log/slog"
	"net/http"
	"time"
)

// logAccess writes one line per request (SPEC §2.1: the trace id is in it).
func (p *Proxy) logAccess(r *http.Request, st *reqState, status int, dur time.Duration) {
	var routeID, clusterID, destID string
	aff := "disabled"
	if st.route != nil {
		routeID, clusterID = st.route.id, st.cluster.id
		if st.route.aff != nil {
			aff = st.dec.Outcome.String()
		}
	}
	if st.dest != nil {
		destID = st.dest.ID
	}
	p.access.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("trace_id", st.traceID),
		slog.String("remote", st.clientHost),
		slog.String("method", r.Method),
		slog.String("host", r.Host),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.Int64("bytes", st.rw.bytes),
		slog.Float64("duration_ms", float64(dur.Microseconds())/1000),
		slog.String("route", routeID),
		slog.String("cluster", clusterID),
		slog.String("destination", destID),
		slog.String("affinity", aff),
		slog.Bool("aborted", st.aborted),
	)
}
