package node

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/keyring"
)

// fakeProgress is a store's progress.
type fakeProgress struct{ applied, commit uint64 }

func (f *fakeProgress) AppliedIndex() uint64 { return f.applied }
func (f *fakeProgress) CommitIndex() uint64  { return f.commit }

func TestDataKeysWaitBrieflyForAnUnknownKeyThenCountTheFailure(t *testing.T) {
	now := time.Now()
	k, err := keyring.GenerateKey(now.Add(-time.Minute), 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issuer := keyring.NewRing(keyring.Options{})
	if err := issuer.Install(k); err != nil {
		t.Fatal(err)
	}
	purpose := keyring.Purpose("Cookie", "app", "aff")
	value, err := issuer.Seal(purpose, []byte("d1"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		desc       string
		behind     bool
		logBrings  bool // the key is applied while the request waits
		fetch      func(ctx context.Context, id string) (keyring.Key, error)
		value      string
		wantReason string // "" opens
		wantAsks   int64
		maxTook    time.Duration
	}{
		{desc: "alone and caught up: fails at once", value: value, wantReason: reasonUnknownToLeader, maxTook: 100 * time.Millisecond},
		{desc: "behind: the log brings the key", behind: true, logBrings: true, value: value, maxTook: unknownKeyWait},
		{desc: "caught up: the leader sends the key", value: value, wantAsks: 1, maxTook: unknownKeyWait,
			fetch: func(ctx context.Context, id string) (keyring.Key, error) { return k, nil }},
		{desc: "the leader holds no such key", value: value, wantReason: reasonUnknownToLeader, wantAsks: 1, maxTook: 100 * time.Millisecond,
			fetch: func(ctx context.Context, id string) (keyring.Key, error) { return keyring.Key{}, errKeyUnknownToLeader }},
		{desc: "the leader revoked it", value: value, wantReason: reasonRevoked, wantAsks: 1, maxTook: 100 * time.Millisecond,
			fetch: func(ctx context.Context, id string) (keyring.Key, error) { return keyring.Key{}, errKeyRevokedOnLeader }},
		{desc: "nobody answers: bounded wait", value: value, wantReason: reasonTimeout, wantAsks: 1, maxTook: unknownKeyWait + 500*time.Millisecond,
			fetch: func(ctx context.Context, id string) (keyring.Key, error) {
				<-ctx.Done()
				return keyring.Key{}, ctx.Err()
			}},
		{desc: "no leader, caught up: fails at once", value: value, wantReason: reasonNoLeader, wantAsks: 1, maxTook: 100 * time.Millisecond,
			fetch: func(ctx context.Context, id string) (keyring.Key, error) { return keyring.Key{}, errNoKeySource }},
		{desc: "a tampered value under a known key never waits", value: value[:len(value)-2] + "AA", wantReason: "-", maxTook: 100 * time.Millisecond,
			fetch: func(ctx context.Context, id string) (keyring.Key, error) {
				<-ctx.Done()
				return keyring.Key{}, ctx.Err()
			}},
		{desc: "garbage never waits", value: "not-a-sealed-value", wantReason: "-", maxTook: 100 * time.Millisecond,
			fetch: func(ctx context.Context, id string) (keyring.Key, error) {
				<-ctx.Done()
				return keyring.Key{}, ctx.Err()
			}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			ring := keyring.NewRing(keyring.Options{})
			if c.wantReason == "-" {
				_ = ring.Install(k) // the value's key is known: its failure is not about the key
			}
			fp := &fakeProgress{applied: 7, commit: 7}
			if c.behind {
				fp.applied = 5
			}
			var asks atomic.Int64
			var fetch func(ctx context.Context, id string) (keyring.Key, error)
			if c.fetch != nil {
				fetch = func(ctx context.Context, id string) (keyring.Key, error) {
					asks.Add(1)
					if id != k.ID {
						t.Errorf("asked for %q, want %q", id, k.ID)
					}
					return c.fetch(ctx, id)
				}
			}
			if c.logBrings {
				go func() { time.Sleep(50 * time.Millisecond); _ = ring.Install(k) }() // the FSM applying it
			}
			dk := newDataKeys(ring, fp, fetch, quietLogger())
			start := time.Now()
			got, err := dk.Open(purpose, c.value)
			took := time.Since(start)
			if took > c.maxTook {
				t.Errorf("took %s, want at most %s", took, c.maxTook)
			}
			if n := asks.Load(); n != c.wantAsks {
				t.Errorf("asked the leader %d times, want %d", n, c.wantAsks)
			}
			switch c.wantReason {
			case "":
				if err != nil || string(got) != "d1" {
					t.Fatalf("Open = %q, %v; want d1", got, err)
				}
				// The key stays usable: a second value opens without asking.
				if _, err := dk.Open(purpose, value); err != nil || asks.Load() != c.wantAsks {
					t.Fatalf("second open: %v, asks %d", err, asks.Load())
				}
			case "-":
				if err == nil || errors.Is(err, keyring.ErrUnknownKey) {
					t.Fatalf("Open err %v, want a non-key failure", err)
				}
				if n := counterSeries(t, dk.failures); n != 0 {
					t.Fatalf("%d failure series counted for a value whose key is known", n)
				}
			default:
				if !errors.Is(err, keyring.ErrUnknownKey) {
					t.Fatalf("Open err %v, want ErrUnknownKey", err)
				}
				if v := counterValue(t, dk.failures, c.wantReason); v != 1 {
					t.Fatalf("failures{reason=%q} = %v, want 1", c.wantReason, v)
				}
			}
		})
	}
}

func TestDataKeysRememberKeysTheLeaderDoesNotHoldAndBoundTheWaits(t *testing.T) {
	k, _ := keyring.GenerateKey(time.Now().Add(-time.Minute), 0, time.Hour)
	issuer := keyring.NewRing(keyring.Options{})
	_ = issuer.Install(k)
	purpose := keyring.Purpose("Cookie", "app", "aff")
	value, _ := issuer.Seal(purpose, []byte("d1"))

	var asks atomic.Int64
	dk := newDataKeys(keyring.NewRing(keyring.Options{}), &fakeProgress{7, 7}, func(ctx context.Context, id string) (keyring.Key, error) {
		asks.Add(1)
		return keyring.Key{}, errKeyUnknownToLeader
	}, quietLogger())
	for range 3 {
		if _, err := dk.Open(purpose, value); !errors.Is(err, keyring.ErrUnknownKey) {
			t.Fatalf("Open err %v", err)
		}
	}
	if asks.Load() != 1 {
		t.Fatalf("asked the leader %d times for one key id it does not hold, want 1 (remembered)", asks.Load())
	}
	if v := counterValue(t, dk.failures, reasonUnknownToLeader); v != 3 {
		t.Fatalf("failures = %v, want 3 (each counted)", v)
	}

	// With maxKeyWaits requests waiting, the next fails at once.
	block := make(chan struct{})
	slow := newDataKeys(keyring.NewRing(keyring.Options{}), &fakeProgress{7, 7}, func(ctx context.Context, id string) (keyring.Key, error) {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return keyring.Key{}, ctx.Err()
	}, quietLogger())
	for range maxKeyWaits {
		slow.sem <- struct{}{}
	}
	start := time.Now()
	if _, err := slow.Open(purpose, value); !errors.Is(err, keyring.ErrUnknownKey) || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("Open with every wait slot taken: %v after %s, want an immediate failure", err, time.Since(start))
	}
	if v := counterValue(t, slow.failures, reasonWaitLimit); v != 1 {
		t.Fatalf("failures{wait_limit} = %v, want 1", v)
	}
	close(block)
}

// counterValue is c's value for the one label value.
func counterValue(t *testing.T, c *prometheus.CounterVec, label string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// counterTotal is the sum of c's series.
func counterTotal(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// counterSeries is how many series c has.
func counterSeries(t *testing.T, c *prometheus.CounterVec) int {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	return n
}

func TestDataKeysLogEachUnknownKeyIDOnceAMinute(t *testing.T) {
	var buf strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil))
	dk := newDataKeys(keyring.NewRing(keyring.Options{}), &fakeProgress{7, 7}, nil, log)
	for _, id := range []string{"a1", "a1", "a1", "b2", "a1"} {
		dk.fail(id, reasonUnknownToLeader)
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if got := strings.Count(out, "key_id=a1"); got != 1 {
		t.Errorf("key a1 logged %d times within a minute, want 1:\n%s", got, out)
	}
	if got := strings.Count(out, "key_id=b2"); got != 1 {
		t.Errorf("key b2 logged %d times, want 1:\n%s", got, out)
	}
	if v := counterValue(t, dk.failures, reasonUnknownToLeader); v != 5 {
		t.Errorf("failures = %v, want 5: every failure counts", v)
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
