package keyshare

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/keyring/keyringtest"
	"github.com/tether-proxy/tether/test/testutil"
)

// fakeProgress is a store's progress.
type fakeProgress struct{ applied, commit atomic.Uint64 }

func (f *fakeProgress) AppliedIndex() uint64 { return f.applied.Load() }
func (f *fakeProgress) CommitIndex() uint64  { return f.commit.Load() }

// answer is a leader's answer holding keys (a revoked one is only named).
func answer(keys ...keyring.Key) *LeaderKeys {
	a := &LeaderKeys{held: map[string]bool{}}
	for _, k := range keys {
		a.held[k.ID] = k.Revoked
		if !k.Revoked {
			k.Material = slices.Clone(k.Material) // the caller clears what it installs
			a.keys = append(a.keys, k)
		}
	}
	return a
}

func TestDataKeysWaitBrieflyForAnUnknownKeyThenCountTheFailure(t *testing.T) {
	k, value := keyringtest.SealedUnderNewKey(t)
	other, _ := keyringtest.SealedUnderNewKey(t)
	revoked := k
	revoked.Revoked = true
	purpose := keyring.Purpose("Cookie", "app", "aff")
	blocks := func(ctx context.Context, have []string, want string) (*LeaderKeys, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	cases := []struct {
		desc       string
		behind     bool
		logBrings  bool // the key is applied while the request waits
		fetch      func(ctx context.Context, have []string, want string) (*LeaderKeys, error)
		value      string
		wantReason string // "" opens
		minAsks    int64
		maxAsks    int64
		maxTook    time.Duration
	}{
		{desc: "alone and caught up: fails at once", value: value, wantReason: ReasonUnknownToLeader, maxTook: 100 * time.Millisecond},
		{desc: "alone and behind: the log brings the key", behind: true, logBrings: true, value: value, maxTook: UnknownKeyWait},
		{desc: "behind: the log brings the key while the leader is asked", behind: true, logBrings: true, value: value, minAsks: 1, maxAsks: 10, maxTook: UnknownKeyWait,
			fetch: func(ctx context.Context, have []string, want string) (*LeaderKeys, error) {
				return &LeaderKeys{behind: true}, nil
			}},
		{desc: "caught up: the leader sends the key", value: value, minAsks: 1, maxAsks: 1, maxTook: UnknownKeyWait,
			fetch: func(ctx context.Context, have []string, want string) (*LeaderKeys, error) {
				return answer(other, k), nil
			}},
		{desc: "the leader holds no such key", value: value, wantReason: ReasonUnknownToLeader, minAsks: 1, maxAsks: 1, maxTook: 100 * time.Millisecond,
			fetch: func(ctx context.Context, have []string, want string) (*LeaderKeys, error) { return answer(other), nil }},
		{desc: "the leader revoked it", value: value, wantReason: ReasonRevoked, minAsks: 1, maxAsks: 1, maxTook: 100 * time.Millisecond,
			fetch: func(ctx context.Context, have []string, want string) (*LeaderKeys, error) {
				return answer(other, revoked), nil
			}},
		{desc: "the leader has not caught up with its log: asked again until the wait ends", value: value, wantReason: ReasonTimeout, minAsks: 2, maxAsks: 11,
			maxTook: UnknownKeyWait + 500*time.Millisecond,
			fetch: func(ctx context.Context, have []string, want string) (*LeaderKeys, error) {
				return &LeaderKeys{held: map[string]bool{}, behind: true}, nil
			}},
		{desc: "a leader of an earlier release sends the one key asked for", value: value, minAsks: 1, maxAsks: 1, maxTook: UnknownKeyWait,
			fetch: func(ctx context.Context, have []string, want string) (*LeaderKeys, error) {
				a := answer(k)
				a.only = want
				return a, nil
			}},
		{desc: "nobody answers: bounded wait", value: value, wantReason: ReasonTimeout, minAsks: 1, maxAsks: 1, maxTook: UnknownKeyWait + 500*time.Millisecond, fetch: blocks},
		{desc: "no leader, caught up: fails at once", value: value, wantReason: ReasonNoLeader, minAsks: 1, maxAsks: 1, maxTook: 100 * time.Millisecond,
			fetch: func(ctx context.Context, have []string, want string) (*LeaderKeys, error) { return nil, errNoKeySource }},
		{desc: "this node leads, caught up: fails at once", value: value, wantReason: ReasonUnknownToLeader, minAsks: 1, maxAsks: 1, maxTook: 100 * time.Millisecond,
			fetch: func(ctx context.Context, have []string, want string) (*LeaderKeys, error) {
				return nil, errLeaderIsSelf
			}},
		{desc: "a tampered value under a known key never waits", value: value[:len(value)-2] + "AA", wantReason: "-", maxTook: 100 * time.Millisecond, fetch: blocks},
		{desc: "garbage never waits", value: "not-a-sealed-value", wantReason: "-", maxTook: 100 * time.Millisecond, fetch: blocks},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			ring := keyring.NewRing(keyring.Options{})
			if c.wantReason == "-" {
				_ = ring.Install(k) // the value's key is known: its failure is not about the key
			}
			_ = ring.Install(other)
			fp := &fakeProgress{}
			fp.commit.Store(7)
			fp.applied.Store(7)
			if c.behind {
				fp.applied.Store(5)
			}
			var asks atomic.Int64
			var fetch func(ctx context.Context, have []string, want string) (*LeaderKeys, error)
			if c.fetch != nil {
				fetch = func(ctx context.Context, have []string, want string) (*LeaderKeys, error) {
					asks.Add(1)
					if want != k.ID || !slices.Contains(have, other.ID) {
						t.Errorf("asked with want %q, have %v; want %q, and %s among those held", want, have, k.ID, other.ID)
					}
					return c.fetch(ctx, have, want)
				}
			}
			if c.logBrings {
				go func() {
					time.Sleep(50 * time.Millisecond) // the FSM applying it
					_ = ring.Install(k)
					fp.applied.Store(7)
				}()
			}
			dk := NewDataKeys(ring, fp, fetch, quietLogger())
			start := time.Now()
			got, err := dk.Open(purpose, c.value)
			took := time.Since(start)
			if took > c.maxTook {
				t.Errorf("took %s, want at most %s", took, c.maxTook)
			}
			if n := asks.Load(); n < c.minAsks || n > c.maxAsks {
				t.Errorf("asked the leader %d times, want %d to %d", n, c.minAsks, c.maxAsks)
			}
			asked := asks.Load()
			switch c.wantReason {
			case "":
				if err != nil || string(got) != "d1" {
					t.Fatalf("Open = %q, %v; want d1", got, err)
				}
				// The key stays usable: a second value opens without asking.
				if _, err := dk.Open(purpose, value); err != nil || asks.Load() != asked {
					t.Fatalf("second open: %v, asks %d", err, asks.Load())
				}
			case "-":
				if err == nil || errors.Is(err, keyring.ErrUnknownKey) {
					t.Fatalf("Open err %v, want a non-key failure", err)
				}
				if n := len(testutil.Counters(t, dk.Failures)); n != 0 {
					t.Fatalf("%d failure series counted for a value whose key is known", n)
				}
			default:
				if !errors.Is(err, keyring.ErrUnknownKey) {
					t.Fatalf("Open err %v, want ErrUnknownKey", err)
				}
				if v := testutil.Counters(t, dk.Failures)[c.wantReason]; v != 1 {
					t.Fatalf("failures{reason=%q} = %v, want 1", c.wantReason, v)
				}
			}
		})
	}
}

func TestDataKeysRememberKeysTheLeaderDoesNotHoldAndBoundTheWaits(t *testing.T) {
	_, value := keyringtest.SealedUnderNewKey(t)
	purpose := keyring.Purpose("Cookie", "app", "aff")
	fp := &fakeProgress{}
	var asks atomic.Int64
	dk := NewDataKeys(keyring.NewRing(keyring.Options{}), fp, func(ctx context.Context, have []string, want string) (*LeaderKeys, error) {
		asks.Add(1)
		return answer(), nil
	}, quietLogger())
	for range 3 {
		if _, err := dk.Open(purpose, value); !errors.Is(err, keyring.ErrUnknownKey) {
			t.Fatalf("Open err %v", err)
		}
	}
	if asks.Load() != 1 {
		t.Fatalf("asked the leader %d times for one key id it does not hold, want 1 (remembered)", asks.Load())
	}
	if v := testutil.Counters(t, dk.Failures)[ReasonUnknownToLeader]; v != 3 {
		t.Fatalf("failures = %v, want 3 (each counted)", v)
	}

	// With maxKeyWaits requests waiting, the next fails at once.
	_, value2 := keyringtest.SealedUnderNewKey(t)
	dk.waits.Store(maxKeyWaits)
	start := time.Now()
	if _, err := dk.Open(purpose, value2); !errors.Is(err, keyring.ErrUnknownKey) || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("Open with every wait slot taken: %v after %s, want an immediate failure", err, time.Since(start))
	}
	if v := testutil.Counters(t, dk.Failures)[ReasonWaitLimit]; v != 1 {
		t.Fatalf("failures{wait_limit} = %v, want 1", v)
	}
}

// However many key ids wait, the node asks the leader one request at a
// time, at most one per keyFetchInterval, and each answer settles every id
// that waited for it: a key the leader really sends opens among hundreds of
// made-up ones.
func TestDataKeysOneRequestAtATimeSettlesEveryWaitingKeyID(t *testing.T) {
	real, realValue := keyringtest.SealedUnderNewKey(t)
	purpose := keyring.Purpose("Cookie", "app", "aff")
	var (
		mu       sync.Mutex
		inFlight int
		maxIn    int
		sentAt   []time.Time
	)
	dk := NewDataKeys(keyring.NewRing(keyring.Options{}), &fakeProgress{}, func(ctx context.Context, have []string, want string) (*LeaderKeys, error) {
		mu.Lock()
		inFlight++
		maxIn = max(maxIn, inFlight)
		sentAt = append(sentAt, time.Now())
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // the round trip
		mu.Lock()
		inFlight--
		mu.Unlock()
		return answer(real), nil
	}, quietLogger())

	const made = 300
	var wg sync.WaitGroup
	var opened, unknown atomic.Int64
	start := time.Now()
	for i := range made + 1 {
		value := realValue
		if i < made {
			_, value = keyringtest.SealedUnderNewKey(t)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pt, err := dk.Open(purpose, value)
			switch {
			case err == nil && string(pt) == "d1":
				opened.Add(1)
			case errors.Is(err, keyring.ErrUnknownKey):
				unknown.Add(1)
			default:
				t.Errorf("Open: %q, %v", pt, err)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if opened.Load() != 1 || unknown.Load() != made {
		t.Errorf("opened %d, unknown %d; want 1 (the key the leader sent) and %d", opened.Load(), unknown.Load(), made)
	}
	if v := testutil.Counters(t, dk.Failures)[ReasonUnknownToLeader]; v != made {
		t.Errorf("failures{unknown_to_leader} = %v, want %d", v, made)
	}
	mu.Lock()
	defer mu.Unlock()
	if maxIn != 1 {
		t.Errorf("%d requests to the leader in flight at once, want 1", maxIn)
	}
	for i := 1; i < len(sentAt); i++ {
		if gap := sentAt[i].Sub(sentAt[i-1]); gap < keyFetchInterval {
			t.Errorf("requests %d and %d sent %s apart, want at least %s", i-1, i, gap, keyFetchInterval)
		}
	}
	if budget := 1 + int(took/keyFetchInterval); len(sentAt) > budget {
		t.Errorf("%d requests to the leader for %d key ids in %s, want at most %d", len(sentAt), made+1, took, budget)
	}
}

// Values under key ids this node cannot get are logged at once, then in
// one line per period with their count by reason; once a period passes
// without any, the next is logged at once again.
func TestDataKeysLogUnknownKeysAtOnceThenOneLineAPeriodWithACount(t *testing.T) {
	var buf testutil.SyncBuffer
	dk := NewDataKeys(keyring.NewRing(keyring.Options{}), &fakeProgress{}, nil, slog.New(slog.NewTextHandler(&buf, nil)))
	// The test ends each period itself.
	var periodEnd []func()
	dk.after = func(d time.Duration, f func()) {
		if d != unknownKeyLogEvery {
			t.Errorf("a period of %s, want %s", d, unknownKeyLogEvery)
		}
		periodEnd = append(periodEnd, f)
	}
	endPeriod := func() {
		t.Helper()
		if len(periodEnd) != 1 {
			t.Fatalf("%d periods under way, want 1", len(periodEnd))
		}
		f := periodEnd[0]
		periodEnd = periodEnd[1:]
		f()
	}
	lines := func() []string {
		var out []string
		for _, l := range strings.Split(buf.String(), "\n") {
			if strings.Contains(l, "does not hold") {
				out = append(out, l)
			}
		}
		return out
	}
	for i, id := range []string{"a1", "a1", "b2", "c3", "a1", "d4"} {
		reason := ReasonUnknownToLeader
		if i == 3 {
			reason = ReasonTimeout
		}
		dk.fail(id, reason)
	}
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "key_id=a1") {
		t.Fatalf("right after the first failures: %d lines, want 1 naming a1:\n%s", len(got), strings.Join(got, "\n"))
	}
	endPeriod()
	got := lines()
	if len(got) != 2 {
		t.Fatalf("after the period: %d lines, want 2:\n%s", len(got), strings.Join(got, "\n"))
	}
	for _, want := range []string{"count=5", "by_reason.unknown_to_leader=4", "by_reason.timeout=1", "key_ids=a1,b2,c3,d4"} {
		if !strings.Contains(got[1], want) {
			t.Errorf("the period's line lacks %q:\n%s", want, got[1])
		}
	}
	// The next period, quiet, logs nothing and closes the window: the next
	// failure is logged at once.
	dk.fail("c3", ReasonUnknownToLeader)
	endPeriod()
	endPeriod()
	if n := len(lines()); n != 3 {
		t.Fatalf("%d lines after a period with one failure and a quiet one, want 3", n)
	}
	if len(periodEnd) != 0 {
		t.Fatalf("a quiet period left %d periods under way, want none", len(periodEnd))
	}
	dk.fail("e5", ReasonNoLeader)
	if got := lines(); len(got) != 4 || !strings.Contains(got[3], "key_id=e5") {
		t.Fatalf("a failure after a quiet period: %d lines, want a fourth naming e5:\n%s", len(got), strings.Join(got, "\n"))
	}
	if v := testutil.Counters(t, dk.Failures)[ReasonUnknownToLeader]; v != 6 {
		t.Errorf("failures = %v, want 6: every failure counts", v)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
