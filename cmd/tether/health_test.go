package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHealthExitsZeroOnlyWhenReady(t *testing.T) {
	ready := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || !ready {
			http.Error(w, `{"error":"no leader"}`, http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte(`{"status":"ready"}`))
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := checkHealth(ctx, srv.URL, "/readyz")
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "no leader") {
		t.Fatalf("not ready: got %v, want an error naming 503 and the answer", err)
	}
	ready = true
	if err := checkHealth(ctx, srv.URL, "/readyz"); err != nil {
		t.Fatalf("ready: %v", err)
	}
	srv.Close()
	if err := checkHealth(ctx, srv.URL, "/readyz"); err == nil {
		t.Fatal("no listener: want an error")
	}
}
