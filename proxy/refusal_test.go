package proxy

import (
	"net/http"
	"testing"

	"github.com/tether-proxy/tether/proxy/affinity"
)

func TestReturn503ErrorHasItsOwnBody(t *testing.T) {
	b := newBackend(t, nil)
	for _, c := range []struct {
		desc    string
		cluster string
		status  int
	}{
		{"default status 503", `"SessionAffinity": {"Enabled": true, "AffinityKeyName": ".T", "FailurePolicy": "Return503Error"}`, 503},
		{"FailureStatusCode", `"SessionAffinity": {"Enabled": true, "AffinityKeyName": ".T", "FailurePolicy": "Return503Error", "FailureStatusCode": 409}`, 409},
	} {
		t.Run(c.desc, func(t *testing.T) {
			h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, c.cluster, "", "")), nil)
			resp, body := get(t, nil, h.front.URL+"/", http.Header{"Cookie": {".T=garbage"}})
			if resp.StatusCode != c.status || body != affinity.RefusalBody {
				t.Fatalf("%d %q, want %d %q", resp.StatusCode, body, c.status, affinity.RefusalBody)
			}
			if resp.Header.Get("X-Tether-Trace-Id") == "" || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Errorf("headers %v", resp.Header)
			}
		})
	}
	// A cluster with no healthy destination keeps the 503 body of its own.
	if errorBody(503) == affinity.RefusalBody {
		t.Fatal("the refusal body is the no-healthy-destination body")
	}
}
