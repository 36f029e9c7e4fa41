package node

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/keyring/keyringtest"
	"github.com/tether-proxy/tether/node/keyshare"
	"github.com/tether-proxy/tether/test/testutil"
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
	_, nobodys := keyringtest.SealedUnderNewKey(t)
	cases := []struct {
		desc        string
		cookie      string
		wantStatus  int
		wantBackend string
		wantReason  string
	}{
		{desc: "a key only the leader holds: fetched, the session stays", cookie: cookie, wantStatus: 200, wantBackend: backend},
		{desc: "again: the fetched key opens it without asking", cookie: cookie, wantStatus: 200, wantBackend: backend},
		{desc: "a key nobody holds: the failure policy (503), counted", cookie: "aff=" + nobodys, wantStatus: 503, wantReason: keyshare.ReasonUnknownToLeader},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			start := time.Now()
			st, b, again := proxyGet(t, f, c.cookie)
			if took := time.Since(start); took > keyshare.UnknownKeyWait+time.Second {
				t.Errorf("took %s", took)
			}
			if st != c.wantStatus || (c.wantBackend != "" && (b != c.wantBackend || again != "")) {
				t.Fatalf("follower answered %d from %q (new cookie %q), want %d from %q", st, b, again, c.wantStatus, c.wantBackend)
			}
			if c.wantReason != "" {
				if v := testutil.Counters(t, f.dataKeys.Failures)[c.wantReason]; v < 1 {
					t.Fatalf("tether_keyring_unknown_key_failures_total{reason=%q} = %v, want 1", c.wantReason, v)
				}
			}
		})
	}
	if v := testutil.Counters(t, f.dataKeys.Resolved)["leader"]; v != 1 {
		t.Fatalf("keys fetched from the leader = %v, want 1", v)
	}
}

// A flood of values under random, well-formed key ids costs a node a
// bounded number of requests to the leader and one log line, each value
// counted by reason; and a key the node really lacks (a rotation it has not
// applied) still comes from the leader in the middle of the flood.
func TestAFloodOfUnknownKeyIDsIsBoundedAndStarvesNoRealFetch(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow in-process cluster test (over 5 s); make test runs it")
	}
	tc := newTestCluster(t, 2)
	tc.captureLogs()
	tc.form(3)
	leader := tc.waitLeader()
	f := tc.follower()

	const total, workers = 3000, 100
	junk := make([]string, total)
	for i := range junk {
		_, v := keyringtest.SealedUnderNewKey(t)
		junk[i] = "aff=" + v
	}
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	url := "http://" + f.ProxyAddrs()[0].String() + "/"
	var next, done, not503 atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= total {
					return
				}
				req, _ := http.NewRequest("GET", url, nil)
				req.Header.Set("Cookie", junk[i])
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusServiceUnavailable {
					not503.Add(1)
				}
				done.Add(1)
			}
		}()
	}

	// Three rotations the follower does not apply while the flood runs:
	// each key is installed on the leader only, which seals with it at
	// once; the follower must ask the leader to open its cookie.
	for r := range 3 {
		testutil.Eventually(t, 60*time.Second, "the flood under way", func() bool { return done.Load() >= int64((r+1)*total/5) })
		k, err := keyring.GenerateKey(time.Now(), 0, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := leader.ring.Install(k); err != nil {
			t.Fatal(err)
		}
		status, backend, cookie := proxyGet(t, leader, "")
		if id, _ := keyring.KeyIDOf(strings.TrimPrefix(cookie, "aff=")); status != 200 || id != k.ID {
			t.Fatalf("leader: %d, cookie under key %q, want %q", status, id, k.ID)
		}
		st, b, again := proxyGet(t, f, cookie)
		if st != 200 || b != backend || again != "" {
			t.Errorf("rotation %d, %d of %d flood requests done: the follower answered %d from %q (new cookie %q) to a cookie under the leader's new key, want 200 from %q",
				r+1, done.Load(), total, st, b, again, backend)
		}
	}
	wg.Wait()
	took := time.Since(start)

	if n := not503.Load(); n != 0 {
		t.Errorf("%d of %d values under unknown key ids were not answered 503 (the failure policy)", n, total)
	}
	var counted float64
	for _, reason := range []string{keyshare.ReasonUnknownToLeader, keyshare.ReasonRevoked, keyshare.ReasonTimeout, keyshare.ReasonNoLeader, keyshare.ReasonWaitLimit} {
		counted += testutil.Counters(t, f.dataKeys.Failures)[reason]
	}
	if counted != total {
		t.Errorf("failures counted by reason: %v, want %d", counted, total)
	}
	if v := testutil.Counters(t, f.dataKeys.Failures)[keyshare.ReasonWaitLimit]; v != 0 {
		t.Errorf("%v values failed without their wait (wait_limit): the flood crowds out real ones", v)
	}
	// A node asks the leader at most ten times a second, one request at a
	// time, whatever the number of key ids.
	sent := testutil.Counters(t, f.keys.Sent)[""]
	if budget := 5 + took.Seconds()*10; sent > budget {
		t.Errorf("the follower sent the leader %v key requests in %s, want at most %v", sent, took.Round(time.Millisecond), budget)
	}
	var lines int
	for _, l := range strings.Split(tc.nodeLog(f.ID()), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "does not hold") {
			lines++
		}
	}
	if budget := 1 + int(took/time.Minute); lines > budget {
		t.Errorf("the follower logged %d lines about unknown key ids in %s, want at most %d (one a minute, with a count)", lines, took.Round(time.Millisecond), budget)
	}
	t.Logf("%d values in %s: %v key requests to the leader, %d log lines", total, took.Round(time.Millisecond), sent, lines)
}
