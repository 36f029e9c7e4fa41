package apiclient

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestClientErrorsSayWhatToCheck: each way an answer can go wrong gives
// the error a user of the CLI reads.
func TestClientErrorsSayWhatToCheck(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			if r.Header.Get("Authorization") != "Bearer tok" {
				http.Error(w, `{"error":"bad token"}`, http.StatusUnauthorized)
				return
			}
			w.Write([]byte(`{"a":1}`))
		case "/refused":
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"error":"not now"}`))
		case "/html":
			w.Write([]byte(`<html>`))
		case "/plain":
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name, base, token, path string
		raw                     bool
		want                    string // "" means no error
	}{
		{"ok", srv.URL, "tok", "/ok", false, ""},
		{"no scheme", strings.TrimPrefix(srv.URL, "http://"), "tok", "/ok", false, ""},
		{"token refused", srv.URL, "", "/ok", false, "bad token (HTTP 401)"},
		{"api error", srv.URL, "", "/refused", false, "not now (HTTP 409)"},
		{"api error raw", srv.URL, "", "/refused", true, "not now (HTTP 409)"},
		{"not json", srv.URL, "", "/html", false, "with a body that is not JSON: is it a proxy port?"},
		{"no error text", srv.URL, "", "/plain", false, "admin API answered 502 Bad Gateway"},
		{"no error text raw", srv.URL, "", "/plain", true, "admin API answered 502 Bad Gateway (HTTP 502)"},
		{"nothing listens", "http://" + closed, "", "/ok", false, "nothing listens there (connection refused)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Client{Base: tc.base, Token: tc.token}
			if tc.raw {
				_, err = c.Raw(ctx, http.MethodGet, tc.path, nil)
			} else {
				_, err = c.Do(ctx, http.MethodGet, tc.path, nil)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestSendReturnsEveryAnswer: Send hands back refusals with their status,
// headers and body, and sends the caller's headers.
func TestSendReturnsEveryAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen", r.Header.Get("X-Ask")+" "+r.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":"no leader"}`))
	}))
	defer srv.Close()
	c := Client{Base: srv.URL + "/"}
	resp, err := c.Send(context.Background(), http.MethodPost, "/x", map[string]int{"n": 1}, http.Header{"X-Ask": {"y"}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 503 || resp.Header.Get("X-Seen") != "y application/json" || string(resp.Body) != `{"error":"no leader"}` {
		t.Fatalf("got %d %q %q", resp.StatusCode, resp.Header.Get("X-Seen"), resp.Body)
	}
}
