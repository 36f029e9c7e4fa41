package errpage

import "testing"

func TestGRPCStatusOfTethersErrors(t *testing.T) {
	for status, want := range map[int]int{
		400: grpcInternal, 401: grpcUnauthenticated, 403: grpcPermissionDenied, 404: grpcUnimplemented,
		408: grpcDeadlineExceeded, 413: grpcResourceExhausted, 429: grpcUnavailable, 502: grpcUnavailable,
		503: grpcUnavailable, 504: grpcDeadlineExceeded, 500: grpcUnknown,
	} {
		if got := grpcStatusOf(status); got != want {
			t.Errorf("HTTP %d: gRPC %d, want %d", status, got, want)
		}
	}
	if got := grpcMessage("100% bad\n"); got != "100%25 bad%0A" {
		t.Errorf("grpcMessage: %q", got)
	}
}
