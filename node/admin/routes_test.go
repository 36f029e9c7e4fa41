package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestGuards: the token and the same-site rule, per route, as a client
// meets them (status, header and the error's words).
func TestGuards(t *testing.T) {
	for _, tc := range []struct {
		name   string
		token  string
		method string
		path   string
		hdr    map[string]string
		host   string
		status int
		want   string // in the body
	}{
		{"health needs no token", "tok", "GET", "/healthz", nil, "", 200, `"ok"`},
		{"read without token", "tok", "GET", "/v1/status", nil, "", 401, "missing or wrong bearer token"},
		{"read with token", "tok", "GET", "/v1/status", map[string]string{"Authorization": "Bearer tok"}, "", 200, `"status"`},
		{"wrong token", "tok", "GET", "/v1/members", map[string]string{"Authorization": "Bearer nope"}, "", 401, "bearer token"},
		{"write cross-site with token", "tok", "POST", "/v1/keyring/rotate", map[string]string{"Authorization": "Bearer tok", "Origin": "http://evil.example"}, "", 403, "cross-site request from Origin"},
		{"tokenless read via rebound name", "", "GET", "/v1/keyring", nil, "evil.example", 403, "DNS rebinding defence"},
		{"tokenless read via node name", "", "GET", "/v1/keyring", nil, "n1:9901", 200, `"keyring"`},
		{"tokenless read via localhost", "", "GET", "/v1/keyring", nil, "localhost:9901", 200, `"keyring"`},
		{"tokenless write from another site", "", "DELETE", "/v1/clusters/a/destinations/b/drain", map[string]string{"Sec-Fetch-Site": "cross-site"}, "", 403, "Sec-Fetch-Site: cross-site"},
		{"unknown endpoint", "", "GET", "/v1/nope", nil, "", 404, "no such endpoint: GET /v1/nope"},
		{"drain route", "", "POST", "/v1/clusters/a/destinations/b/drain", nil, "", 200, `"drain"`},
		{"undrain route", "", "DELETE", "/v1/clusters/a/destinations/b/drain", nil, "", 200, `"undrain"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := Handler(Config{Token: []byte(tc.token), Names: []string{"n1"}, AtIndex: same, OnLeader: same}, answering())
			req := httptest.NewRequest(tc.method, tc.path, nil)
			if tc.host != "" {
				req.Host = tc.host
			} else {
				req.Host = "127.0.0.1:9901"
			}
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != tc.status || !strings.Contains(string(body), tc.want) {
				t.Fatalf("got %d %s, want %d with %q", rec.Code, body, tc.status, tc.want)
			}
			if rec.Code == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") != `Bearer realm="tether"` {
				t.Fatalf("401 without WWW-Authenticate: %v", rec.Header())
			}
		})
	}
}
