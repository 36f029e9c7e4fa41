package node

import (
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
)

// A node that meets a value sealed under a key it does not hold asks the
// leader for it (wrapped, over gossip) instead of treating the value as
// invalid; a key the leader does not hold either fails after the bounded
// wait, counted by reason.
func TestFollowerAsksTheLeaderForAKeyItDoesNotHold(t *testing.T) {
	tc := newTestCluster(t, 2)
	tc.form(3)
	leader := tc.waitLeader()
	f := tc.follower()
	// A key the leader holds and the follower has not applied: the
	// leader encrypts with it at once.
	k, err := keyring.GenerateKey(time.Now(), 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.ring.Install(k); err != nil {
		t.Fatal(err)
	}
	if f.ring.Has(k.ID) {
		t.Fatal("the follower holds the key already")
	}
	status, backend, cookie := proxyGet(t, leader, "")
	if status != 200 || cookie == "" {
		t.Fatalf("leader: %d, cookie %q", status, cookie)
	}
	if id, _ := keyring.KeyIDOf(strings.TrimPrefix(cookie, "aff=")); id != k.ID {
		t.Fatalf("the leader sealed with %q, want %q", id, k.ID)
	}
	cases := []struct {
		desc        string
		cookie      string
		wantStatus  int
		wantBackend string
		wantReason  string
	}{
		{desc: "a key only the leader holds: fetched, the session stays", cookie: cookie, wantStatus: 200, wantBackend: backend},
		{desc: "again: the fetched key opens it without asking", cookie: cookie, wantStatus: 200, wantBackend: backend},
		{desc: "a key nobody holds: the failure policy (503), counted", cookie: "aff=" + sealWithNewKey(t), wantStatus: 503, wantReason: reasonUnknownToLeader},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			start := time.Now()
			st, b, again := proxyGet(t, f, c.cookie)
			if took := time.Since(start); took > unknownKeyWait+time.Second {
				t.Errorf("took %s", took)
			}
			if st != c.wantStatus || (c.wantBackend != "" && (b != c.wantBackend || again != "")) {
				t.Fatalf("follower answered %d from %q (new cookie %q), want %d from %q", st, b, again, c.wantStatus, c.wantBackend)
			}
			if c.wantReason != "" {
				if v := counterValue(t, f.dataKeys.failures, c.wantReason); v < 1 {
					t.Fatalf("tether_keyring_unknown_key_failures_total{reason=%q} = %v, want 1", c.wantReason, v)
				}
			}
		})
	}
	if v := counterValue(t, f.dataKeys.resolved, "leader"); v != 1 {
		t.Fatalf("keys fetched from the leader = %v, want 1", v)
	}
}

// sealWithNewKey seals a Cookie-policy value of cluster app under a key no
// node holds.
func sealWithNewKey(t *testing.T) string {
	t.Helper()
	k, err := keyring.GenerateKey(time.Now().Add(-time.Minute), 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r := keyring.NewRing(keyring.Options{})
	if err := r.Install(k); err != nil {
		t.Fatal(err)
	}
	v, err := r.Seal(keyring.Purpose("Cookie", "app", "aff"), []byte("d1"))
	if err != nil {
		t.Fatal(err)
	}
	return v
}
