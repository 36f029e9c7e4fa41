package affinity_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/proxy/affinity"
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// The data path hands the cluster's keyring.Ring to the engine.
var _ affinity.Keyring = (*keyring.Ring)(nil)

// BenchmarkResolveRealKeyring measures Resolve of a valid sealed value (the
// common request of a Cookie or CustomHeader session) with the production
// keyring: base64url decode, AES-256-GCM open, lookup. Target: under 1 µs.
func BenchmarkResolveRealKeyring(b *testing.B) {
	now := time.Now()
	key, err := keyring.GenerateKey(now.Add(-time.Hour), 0, 90*24*time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	ring := keyring.NewRing(keyring.Options{})
	if err := ring.Install(key); err != nil {
		b.Fatal(err)
	}
	var ds []*upstream.Destination
	for _, id := range []string{"app-1", "app-2", "app-3"} {
		ds = append(ds, upstream.NewDestination(id, &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, nil, "", nil))
	}
	c := upstream.NewCluster("c", ds)
	target := ds[1]

	for _, pol := range []string{"Cookie", "CustomHeader"} {
		b.Run(pol, func(b *testing.B) {
			cfg := config.SessionAffinity{Enabled: true, Policy: pol, AffinityKeyName: "K"}
			p, err := affinity.New("c", cfg, c, affinity.Options{Keyring: ring})
			if err != nil {
				b.Fatal(err)
			}
			// Issue a value the way the data path does: a new session's
			// response to target.
			d := p.Resolve(httptest.NewRequest(http.MethodGet, "/", nil), c, now, nil)
			resp := &http.Response{Header: http.Header{}}
			p.Affinitize(resp, target, d, false)
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if pol == "CustomHeader" {
				v := resp.Header.Get("K")
				if v == "" {
					b.Fatal("no header value issued")
				}
				r.Header.Set("K", v)
				r.Header.Set("Cookie", "a=1; b=2")
			} else {
				ck, err := http.ParseSetCookie(resp.Header.Get("Set-Cookie"))
				if err != nil || ck.Name != "K" || ck.Value == "" {
					b.Fatalf("no cookie issued: %v", err)
				}
				r.Header.Set("Cookie", "a=1; K="+ck.Value+"; b=2")
			}
			buf := make([]*upstream.Destination, 0, 8)
			if d := p.Resolve(r, c, now, buf); d.Outcome != affinity.Routed || len(d.Candidates) != 1 || d.Candidates[0] != target {
				b.Fatalf("outcome %v candidates %v, want routed to %s", d.Outcome, d.Candidates, target.ID)
			}
			b.ReportAllocs()
			for b.Loop() {
				p.Resolve(r, c, now, buf[:0])
			}
		})
	}
}
