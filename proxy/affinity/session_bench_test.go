package affinity_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/proxy/affinity"
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// BenchmarkAffinitizeNewSession measures attaching the key of a new
// session (Cookie policy, production keyring): "session" seals a value
// with a session id per new session (the default); "shared" is the reuse
// of one value per group and key, which is what every new session cost
// before session ids and what a node falls back to once a key's budget of
// session seals is spent.
func BenchmarkAffinitizeNewSession(b *testing.B) {
	now := time.Now()
	key, err := keyring.GenerateKey(now.Add(-time.Hour), 0, 90*24*time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	ring := keyring.NewRing(keyring.Options{})
	if err := ring.Install(key); err != nil {
		b.Fatal(err)
	}
	d := upstream.NewDestination("app-1", &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, nil, "", nil)
	c := upstream.NewCluster("c", []*upstream.Destination{d})
	p, err := affinity.New("c", config.SessionAffinity{Enabled: true, Policy: "Cookie", AffinityKeyName: "K"}, c, affinity.Options{Keyring: ring})
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"session", "shared"} {
		b.Run(mode, func(b *testing.B) {
			if mode == "shared" {
				defer affinity.SetSessionSealBudget(0)()
			} else {
				defer affinity.SetSessionSealBudget(1 << 62)()
			}
			resp := &http.Response{Header: http.Header{}}
			dec := affinity.Decision{Outcome: affinity.NoSession, Attach: true}
			b.ReportAllocs()
			for b.Loop() {
				clear(resp.Header)
				p.Affinitize(resp, d, dec, false)
			}
		})
	}
}
