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

// TestSealedValueReusedUntilActiveKeyChanges: with the production keyring
// every new session gets a value of its own (its session id) while the
// active key's budget of session seals lasts; once it is spent, a
// destination's sealed value is sealed once per active key (sparing AES-GCM's
// random-nonce budget), and a rotation or revocation of the active key makes
// new sessions get a value sealed with the new active key.
func TestSealedValueReusedUntilActiveKeyChanges(t *testing.T) {
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	ring := keyring.NewRing(keyring.Options{Now: clock})
	install := func() keyring.Key {
		k, err := keyring.GenerateKey(now, 0, 90*24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := ring.Install(k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	a := install()
	d := upstream.NewDestination("app-1", &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, nil, "", nil)
	c := upstream.NewCluster("c", []*upstream.Destination{d})
	p, err := affinity.New("c", config.SessionAffinity{Enabled: true, Policy: "CustomHeader", AffinityKeyName: "K"}, c,
		affinity.Options{Keyring: ring, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	issue := func() string {
		resp := &http.Response{Header: http.Header{}}
		p.Affinitize(resp, d, affinity.Decision{Attach: true}, false)
		v := resp.Header.Get("K")
		if v == "" {
			t.Fatal("no value issued")
		}
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("K", v)
		if dec := p.Resolve(r, c, now, nil); dec.Outcome != affinity.Routed {
			t.Fatalf("issued value resolves as %v, want routed", dec.Outcome)
		}
		return v
	}
	if one, two := issue(), issue(); one == two {
		t.Fatalf("two new sessions got the same value %q within the budget", one)
	}
	defer affinity.SetSessionSealBudget(0)()
	first := issue()
	if again := issue(); again != first {
		t.Fatalf("same active key sealed again: %q then %q", first, again)
	}

	now = now.Add(time.Minute)
	b := install() // activates now, later than a: the new active key
	if ring.ActiveKeyID(now) != b.ID {
		t.Fatalf("active key %s, want %s", ring.ActiveKeyID(now), b.ID)
	}
	rotated := issue()
	if rotated == first {
		t.Fatal("value not resealed after rotation")
	}
	if err := ring.Revoke(b.ID); err != nil {
		t.Fatal(err)
	}
	if ring.ActiveKeyID(now) != a.ID {
		t.Fatalf("after revoking %s the active key is %s, want %s", b.ID, ring.ActiveKeyID(now), a.ID)
	}
	if after := issue(); after == rotated {
		t.Fatal("value sealed with a revoked key still issued")
	}
}
