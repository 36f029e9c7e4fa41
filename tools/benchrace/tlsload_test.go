package main

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestTLSLoadCountsResumption: without -resume every connection shakes
// hands in full; with it, the connections after each worker's first
// resume, and the run says so.
func TestTLSLoadCountsResumption(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Cookie") != "s=1" {
			w.WriteHeader(400)
		}
		w.Write([]byte("hello"))
	}))
	srv.StartTLS()
	defer srv.Close()
	full, err := tlsLoad(srv.URL+"/hash/1k", 2, 300*time.Millisecond, false, []string{"Cookie: s=1"})
	if err != nil || full.Requests == 0 || full.Resumed != 0 || full.Errors != 0 {
		t.Fatalf("full handshakes: %+v, %v", full, err)
	}
	res, err := tlsLoad(srv.URL+"/hash/1k", 2, 300*time.Millisecond, true, []string{"Cookie: s=1"})
	if err != nil || res.Requests < 4 || res.Resumed < res.Requests-2 {
		t.Fatalf("resumed handshakes: %+v, %v", res, err)
	}
	if _, err := tlsLoad(srv.URL+"/x", 1, 100*time.Millisecond, false, nil); err == nil || !strings.Contains(err.Error(), "no request completed") {
		t.Fatalf("a load answered 400 throughout: %v", err)
	}
}

// TestExpandCases: every case that more than tether runs is also run
// against the net/http backends, under their prefix and named for them;
// -cases selects a case's every backend by its name.
func TestExpandCases(t *testing.T) {
	all := expandCases(backendKinds)
	byName := map[string]caseDef{}
	for _, c := range all {
		byName[c.Name] = c
	}
	for _, c := range cases {
		n, ok := byName[c.Name+".nethttp"]
		if len(c.only) > 0 {
			if ok {
				t.Errorf("%s (tether only) was expanded", c.Name)
			}
			continue
		}
		if !ok || n.path != "/n"+c.path || n.Backend != "nethttp" || n.base != c.Name || n.tls != c.tls || n.h2 != c.h2 || n.handshake != c.handshake {
			t.Errorf("%s: nethttp case %+v", c.Name, n)
		}
		if r := byName[c.Name]; r.path != c.path || r.Backend != "raw" {
			t.Errorf("%s: raw case %+v", c.Name, r)
		}
	}
	var sel []string
	for _, c := range all {
		if selected([]string{"h1-tls"}, c) {
			sel = append(sel, c.Name)
		}
	}
	if !slices.Equal(sel, []string{"h1-tls", "h1-tls.nethttp"}) {
		t.Errorf("-cases h1-tls selects %v", sel)
	}
	if names := expandCases([]string{"raw"}); len(names) != len(cases) {
		t.Errorf("raw only: %d cases, want %d", len(names), len(cases))
	}
}
