package lean

import (
	"net/http"
	"testing"
)

func TestCanonicalAddr(t *testing.T) {
	for in, want := range map[string]string{
		"http://a.example:8080/x": "a.example:8080",
		"http://a.example/x":      "a.example:80",
		"http://[::1]:81/":        "[::1]:81",
		"http://[::1]/":           "[::1]:80",
		"http://10.0.0.1/":        "10.0.0.1:80",
	} {
		req, _ := http.NewRequest("GET", in, nil)
		if got := canonicalAddr(req); got != want {
			t.Errorf("canonicalAddr(%s) = %q, want %q", in, got, want)
		}
	}
}
