package dnscache

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/tether-proxy/tether/test/testutil"
)

// fakeDNS is a real miekg/dns server on 127.0.0.1 whose answers the test
// controls.
type fakeDNS struct {
	addr string
	hits atomic.Int32 // queries received

	mu      sync.Mutex
	answers map[string][]dns.RR // by lowercase FQDN, A and AAAA mixed
	rcode   int                 // non-zero: reply with this rcode
	silent  bool                // do not reply at all (timeout)
	gate    chan struct{}       // if set, handlers wait for it to close
}

func newFakeDNS(t *testing.T) *fakeDNS {
	t.Helper()
	f := &fakeDNS{answers: map[string][]dns.RR{}}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = pc.LocalAddr().String()
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, Handler: f, NotifyStartedFunc: func() { close(started) }}
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return f
}

func (f *fakeDNS) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	f.hits.Add(1)
	f.mu.Lock()
	gate, silent, rcode := f.gate, f.silent, f.rcode
	var ans []dns.RR
	q := req.Question[0]
	for _, rr := range f.answers[strings.ToLower(q.Name)] {
		if rr.Header().Rrtype == q.Qtype || rr.Header().Rrtype == dns.TypeCNAME {
			ans = append(ans, dns.Copy(rr))
		}
	}
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if silent {
		return
	}
	m := new(dns.Msg)
	m.SetReply(req)
	switch {
	case rcode != 0:
		m.Rcode = rcode
	case len(ans) == 0 && f.unknown(q.Name):
		m.Rcode = dns.RcodeNameError
	default:
		m.Answer = ans
	}
	w.WriteMsg(m)
}

func (f *fakeDNS) unknown(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.answers[strings.ToLower(name)]
	return !ok
}

// set replaces the records of name; records are "A 127.0.0.1", "AAAA ::1"
// or "CNAME other.test.", each with the given TTL, or full RRs
// ("x.test. 10 IN A 127.0.0.1") for chains.
func (f *fakeDNS) set(t *testing.T, name string, ttl int, recs ...string) {
	t.Helper()
	var rrs []dns.RR
	for _, r := range recs {
		if !strings.Contains(r, " IN ") { // short form: owner and TTL implied
			r = dns.Fqdn(name) + " " + strconv.Itoa(ttl) + " IN " + r
		}
		rr, err := dns.NewRR(r)
		if err != nil {
			t.Fatal(err)
		}
		rrs = append(rrs, rr)
	}
	f.mu.Lock()
	f.answers[strings.ToLower(dns.Fqdn(name))] = rrs
	f.mu.Unlock()
}

// block makes the handler hold every query until release is called (also
// called at cleanup, so no handler stays blocked).
func (f *fakeDNS) block(t *testing.T) (release func()) {
	gate := make(chan struct{})
	release = sync.OnceFunc(func() {
		f.mu.Lock()
		f.gate = nil
		f.mu.Unlock()
		close(gate)
	})
	t.Cleanup(release)
	f.mu.Lock()
	f.gate = gate
	f.mu.Unlock()
	return release
}

// fail makes every query answer rcode, or time out if rcode is -1.
func (f *fakeDNS) fail(rcode int) {
	f.mu.Lock()
	f.rcode, f.silent = max(rcode, 0), rcode < 0
	f.mu.Unlock()
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// syncBuf is a goroutine-safe log sink.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// newTestResolver wires a resolver to f with a fake clock, an empty hosts
// file and a captured log.
func newTestResolver(t *testing.T, f *fakeDNS, mod func(*Options)) (*Resolver, *fakeClock, *syncBuf) {
	t.Helper()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	logs := &syncBuf{}
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	o := Options{
		Servers:     []string{f.addr},
		Search:      []string{},
		HostsFile:   hosts,
		Timeout:     200 * time.Millisecond,
		MinTTL:      time.Second,
		MaxTTL:      time.Hour,
		NegativeTTL: 5 * time.Second,
		Now:         clk.Now,
		Logger:      slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(&o)
	}
	r := New(o)
	t.Cleanup(r.Close)
	return r, clk, logs
}

// inFlight reports whether a refresh of name is running.
func inFlight(r *Resolver, name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[name] != nil
}

// settle waits until no refresh is in flight.
func settle(t *testing.T, r *Resolver) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, "condition", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.calls) == 0
	})
}

// lookupNow looks host up and fails the test if that takes 5s, which only
// happens when the lookup waits on a refresh the test keeps blocked.
func lookupNow(t *testing.T, r *Resolver, host string) string {
	t.Helper()
	type res struct {
		addrs []netip.Addr
		err   error
	}
	ch := make(chan res, 1)
	go func() {
		addrs, err := r.LookupHost(context.Background(), host)
		ch <- res{addrs, err}
	}()
	select {
	case got := <-ch:
		if got.err != nil {
			t.Fatalf("LookupHost(%q): %v", host, got.err)
		}
		return addrs2str(got.addrs)
	case <-time.After(5 * time.Second):
		t.Fatalf("LookupHost(%q) waited for the refresh", host)
		return ""
	}
}

func mustLookup(t *testing.T, r *Resolver, host string) string {
	t.Helper()
	addrs, err := r.LookupHost(context.Background(), host)
	if err != nil {
		t.Fatalf("LookupHost(%q): %v", host, err)
	}
	return addrs2str(addrs)
}

// hitsAfter runs fn and returns how many queries the server received.
func hitsAfter(f *fakeDNS, fn func()) int32 {
	before := f.hits.Load()
	fn()
	return f.hits.Load() - before
}

func TestNamesCachedForRecordTTL(t *testing.T) {
	f := newFakeDNS(t)
	f.set(t, "app.test", 30, "A 127.0.0.1")
	r, clk, _ := newTestResolver(t, f, nil)

	if n := hitsAfter(f, func() { mustLookup(t, r, "app.test") }); n == 0 {
		t.Fatal("first lookup did not query the server")
	}
	clk.Advance(29 * time.Second)
	f.set(t, "app.test", 30, "A 127.0.0.2")
	if n := hitsAfter(f, func() {
		if got := mustLookup(t, r, "APP.test"); got != "127.0.0.1" {
			t.Errorf("within TTL got %s, want cached 127.0.0.1", got)
		}
	}); n != 0 {
		t.Errorf("within TTL the server got %d queries, want 0", n)
	}
	clk.Advance(2 * time.Second)
	if got := mustLookup(t, r, "app.test"); got != "127.0.0.1" {
		t.Errorf("first lookup after TTL got %s, want stale 127.0.0.1 while refreshing", got)
	}
	settle(t, r)
	if got := mustLookup(t, r, "app.test"); got != "127.0.0.2" {
		t.Errorf("after the refresh got %s, want 127.0.0.2", got)
	}
}

func TestTTLClampedToMinAndMax(t *testing.T) {
	cases := []struct {
		desc       string
		ttl        int
		minTTL     time.Duration
		maxTTL     time.Duration
		staleAfter time.Duration
	}{
		{desc: "TTL 0 is raised to MinTTL", ttl: 0, minTTL: 10 * time.Second, maxTTL: time.Hour, staleAfter: 10 * time.Second},
		{desc: "TTL above MaxTTL is lowered to it", ttl: 3600, minTTL: time.Second, maxTTL: time.Minute, staleAfter: time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			f := newFakeDNS(t)
			f.set(t, "app.test", tc.ttl, "A 127.0.0.1")
			r, clk, _ := newTestResolver(t, f, func(o *Options) { o.MinTTL, o.MaxTTL = tc.minTTL, tc.maxTTL })
			mustLookup(t, r, "app.test")
			clk.Advance(tc.staleAfter - time.Second)
			if n := hitsAfter(f, func() { mustLookup(t, r, "app.test") }); n != 0 {
				t.Errorf("1s before %v: %d queries, want 0", tc.staleAfter, n)
			}
			clk.Advance(time.Second)
			if n := hitsAfter(f, func() { mustLookup(t, r, "app.test"); settle(t, r) }); n == 0 {
				t.Errorf("at %v: no refresh", tc.staleAfter)
			}
		})
	}
}

func TestCNAMEChainFollowed(t *testing.T) {
	cases := []struct {
		desc       string
		records    map[string][]string
		want       string
		staleAfter time.Duration
	}{
		{
			desc: "chain in one answer: final name's records, smallest TTL of the chain",
			records: map[string][]string{"alias.test": {
				"alias.test. 60 IN CNAME mid.test.",
				"mid.test. 10 IN CNAME real.test.",
				"other.test. 300 IN A 127.0.0.66",
				"real.test. 300 IN A 127.0.0.9",
			}},
			want:       "127.0.0.9",
			staleAfter: 10 * time.Second,
		},
		{
			desc: "chain without addresses: the final name is queried",
			records: map[string][]string{
				"alias.test": {"alias.test. 60 IN CNAME real.test."},
				"real.test":  {"real.test. 20 IN A 127.0.0.8"},
			},
			want:       "127.0.0.8",
			staleAfter: 20 * time.Second,
		},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			f := newFakeDNS(t)
			for name, recs := range tc.records {
				f.set(t, name, 0, recs...)
			}
			r, clk, _ := newTestResolver(t, f, nil)
			if got := mustLookup(t, r, "alias.test"); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
			clk.Advance(tc.staleAfter - time.Second)
			if n := hitsAfter(f, func() { mustLookup(t, r, "alias.test") }); n != 0 {
				t.Errorf("before the chain's smallest TTL: %d queries, want 0", n)
			}
			clk.Advance(time.Second)
			if n := hitsAfter(f, func() { mustLookup(t, r, "alias.test"); settle(t, r) }); n == 0 {
				t.Errorf("at the chain's smallest TTL: no refresh")
			}
		})
	}
}

// failureModes are the ways a query can fail.
var failureModes = []struct {
	desc    string
	apply   func(t *testing.T, f *fakeDNS, name string)
	wantErr error
}{
	{"SERVFAIL", func(t *testing.T, f *fakeDNS, _ string) { f.fail(dns.RcodeServerFailure) }, ErrLookupFailed},
	{"NXDOMAIN", func(t *testing.T, f *fakeDNS, _ string) { f.fail(dns.RcodeNameError) }, ErrNotFound},
	{"no records", func(t *testing.T, f *fakeDNS, name string) { f.set(t, name, 10) }, ErrNoAddresses},
	{"timeout", func(t *testing.T, f *fakeDNS, _ string) { f.fail(-1) }, ErrLookupFailed},
}

func TestFailedRefreshKeepsLastKnownGood(t *testing.T) {
	for _, tc := range failureModes {
		t.Run(tc.desc, func(t *testing.T) {
			f := newFakeDNS(t)
			f.set(t, "app.test", 10, "A 127.0.0.1")
			// Timeout well above scheduling noise: the refresh must still be
			// blocked in the server when the lookup has returned.
			r, clk, logs := newTestResolver(t, f, func(o *Options) { o.Timeout = time.Second })
			mustLookup(t, r, "app.test")

			clk.Advance(11 * time.Second)
			tc.apply(t, f, "app.test")
			release := f.block(t)
			before := f.hits.Load()
			if got := lookupNow(t, r, "app.test"); got != "127.0.0.1" {
				t.Errorf("during a failing refresh got %s, want last known good 127.0.0.1", got)
			}
			if !inFlight(r, "app.test") {
				t.Error("the lookup returned only after the refresh; want it served without waiting")
			}
			release()
			settle(t, r)
			if f.hits.Load() == before {
				t.Fatal("stale entry did not trigger a refresh")
			}
			if got := mustLookup(t, r, "app.test"); got != "127.0.0.1" {
				t.Errorf("after a failed refresh got %s, want last known good 127.0.0.1", got)
			}
			clk.Advance(4 * time.Second)
			if n := hitsAfter(f, func() { mustLookup(t, r, "app.test"); settle(t, r) }); n != 0 {
				t.Errorf("within NegativeTTL: %d queries, want 0", n)
			}
			clk.Advance(2 * time.Second)
			if n := hitsAfter(f, func() {
				if got := lookupNow(t, r, "app.test"); got != "127.0.0.1" {
					t.Errorf("retry after NegativeTTL: got %s, want 127.0.0.1", got)
				}
				settle(t, r)
			}); n == 0 {
				t.Errorf("after NegativeTTL: no retry")
			}
			if w := strings.Count(logs.String(), "level=WARN"); w != 1 {
				t.Errorf("%d Warn lines for one failure streak, want 1:\n%s", w, logs)
			}

			f.fail(0)
			f.set(t, "app.test", 10, "A 127.0.0.3")
			clk.Advance(6 * time.Second)
			mustLookup(t, r, "app.test")
			settle(t, r)
			if got := mustLookup(t, r, "app.test"); got != "127.0.0.3" {
				t.Errorf("after recovery got %s, want 127.0.0.3", got)
			}
		})
	}
}

// TestExpiredEntryServedWhileRefreshing: stale while revalidate. Callers
// that find an expired entry with addresses are answered at once while the
// server sits on the query, and they share one refresh.
func TestExpiredEntryServedWhileRefreshing(t *testing.T) {
	f := newFakeDNS(t)
	f.set(t, "app.test", 10, "A 127.0.0.1")
	r, clk, _ := newTestResolver(t, f, func(o *Options) { o.Timeout = 30 * time.Second })
	mustLookup(t, r, "app.test")

	f.set(t, "app.test", 10, "A 127.0.0.2")
	release := f.block(t)
	clk.Advance(11 * time.Second)
	before := f.hits.Load()
	const n = 20
	got := make(chan string, n)
	for range n {
		go func() {
			addrs, err := r.LookupHost(context.Background(), "app.test")
			if err != nil {
				got <- err.Error()
				return
			}
			got <- addrs2str(addrs)
		}()
	}
	timeout := time.After(5 * time.Second)
	for range n {
		select {
		case g := <-got:
			if g != "127.0.0.1" {
				t.Errorf("while refreshing got %s, want stale 127.0.0.1", g)
			}
		case <-timeout:
			t.Fatal("callers of an expired entry waited for the refresh")
		}
	}
	testutil.Eventually(t, 5*time.Second, "condition", func() bool { return f.hits.Load()-before == 2 }) // one A, one AAAA
	if !inFlight(r, "app.test") {
		t.Fatal("no refresh in flight although the server has not answered")
	}
	release()
	settle(t, r)
	if g := mustLookup(t, r, "app.test"); g != "127.0.0.2" {
		t.Errorf("after the refresh got %s, want 127.0.0.2", g)
	}
	if h := f.hits.Load() - before; h != 2 {
		t.Errorf("%d queries for %d callers of an expired entry, want 2 (one refresh)", h, n)
	}
}

// TestCloseStopsBackgroundRefreshes: Close abandons a refresh the server
// never answers, leaves no goroutine behind and starts no new refresh.
func TestCloseStopsBackgroundRefreshes(t *testing.T) {
	f := newFakeDNS(t)
	f.set(t, "app.test", 10, "A 127.0.0.1")
	r, clk, _ := newTestResolver(t, f, func(o *Options) { o.Timeout = time.Minute })
	mustLookup(t, r, "app.test")
	baseline := runtime.NumGoroutine()

	release := f.block(t)
	clk.Advance(11 * time.Second)
	before := f.hits.Load()
	mustLookup(t, r, "app.test")
	testutil.Eventually(t, 5*time.Second, "condition", func() bool { return f.hits.Load()-before == 2 }) // refresh held by the server
	closed := make(chan struct{})
	go func() { r.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a refresh the server never answers")
	}
	release() // let the server's own handler goroutines finish
	testutil.Eventually(t, 5*time.Second, "condition", func() bool { return runtime.NumGoroutine() <= baseline })

	if n := hitsAfter(f, func() {
		if got := mustLookup(t, r, "app.test"); got != "127.0.0.1" {
			t.Errorf("after Close got %s, want the cached 127.0.0.1", got)
		}
	}); n != 0 || inFlight(r, "app.test") {
		t.Errorf("after Close a lookup of an expired entry queried %d times, want no refresh", n)
	}
	if _, err := r.LookupHost(context.Background(), "other.test"); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close an uncached name: err = %v, want ErrClosed", err)
	}
	r.Close() // idempotent
}

// TestIdleEntriesEvicted: a name not looked up for 10 × MaxTTL is dropped by
// a later lookup's sweep; names in use stay.
func TestIdleEntriesEvicted(t *testing.T) {
	f := newFakeDNS(t)
	for _, name := range []string{"idle.test", "used.test", "new.test"} {
		f.set(t, name, 3600, "A 127.0.0.1")
	}
	r, clk, _ := newTestResolver(t, f, func(o *Options) { o.MaxTTL = time.Minute })
	mustLookup(t, r, "idle.test")
	mustLookup(t, r, "used.test")
	clk.Advance(6 * time.Minute)
	mustLookup(t, r, "used.test")
	settle(t, r)
	clk.Advance(4*time.Minute + time.Second) // idle.test unused for 10m1s
	mustLookup(t, r, "new.test")

	r.mu.Lock()
	cached := slices.Sorted(maps.Keys(r.cache))
	r.mu.Unlock()
	if got, want := strings.Join(cached, ","), "new.test,used.test"; got != want {
		t.Errorf("cached names %s, want %s", got, want)
	}
	if n := hitsAfter(f, func() { mustLookup(t, r, "idle.test") }); n == 0 {
		t.Error("an evicted name was answered without a query")
	}
}

func TestFirstLookupFailureIsError(t *testing.T) {
	for _, tc := range failureModes {
		t.Run(tc.desc, func(t *testing.T) {
			f := newFakeDNS(t)
			tc.apply(t, f, "never.test")
			r, clk, _ := newTestResolver(t, f, nil)
			_, err := r.LookupHost(context.Background(), "never.test")
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "resolve never.test: ") || strings.Contains(msg, "127.0.0.1") {
				t.Errorf("error %q: want \"resolve never.test: ...\" without server detail", msg)
			}
			if n := hitsAfter(f, func() { r.LookupHost(context.Background(), "never.test") }); n != 0 {
				t.Errorf("failure not cached for NegativeTTL: %d queries", n)
			}
			if _, err := r.DialContext(context.Background(), "tcp", "never.test:80"); !errors.Is(err, tc.wantErr) {
				t.Errorf("DialContext err = %v, want %v", err, tc.wantErr)
			}
			clk.Advance(5 * time.Second)
			if n := hitsAfter(f, func() { r.LookupHost(context.Background(), "never.test") }); n == 0 {
				t.Errorf("no retry after NegativeTTL")
			}
		})
	}
}

func TestIPLiteralsBypassResolver(t *testing.T) {
	cases := []struct{ desc, host, want string }{
		{"IPv4 literal", "127.0.0.1", "127.0.0.1"},
		{"IPv6 literal", "::1", "::1"},
		{"IPv6 literal in brackets", "[::1]", "::1"},
		{"IPv6 literal with zone", "fe80::1%lo", "fe80::1%lo"},
		{"IPv4-mapped IPv6 literal", "::ffff:127.0.0.1", "127.0.0.1"},
	}
	f := newFakeDNS(t)
	r, _, _ := newTestResolver(t, f, nil)
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			if n := hitsAfter(f, func() {
				if got := mustLookup(t, r, tc.host); got != tc.want {
					t.Errorf("got %s, want %s", got, tc.want)
				}
			}); n != 0 {
				t.Errorf("%d DNS queries for an IP literal", n)
			}
		})
	}
	t.Run("dial of an IPv4 literal", func(t *testing.T) {
		ln, accepted := listen(t, "127.0.0.1", "0")
		if n := hitsAfter(f, func() { dialTag(t, r, "tcp", ln.Addr().String(), accepted) }); n != 0 {
			t.Errorf("%d DNS queries for an IP literal dial", n)
		}
	})
}

func TestHostsFileResolvesWithoutServer(t *testing.T) {
	f := newFakeDNS(t)
	f.set(t, "myhost.test", 30, "A 127.0.0.99")
	r, clk, _ := newTestResolver(t, f, nil)
	path := r.opts.HostsFile
	write := func(content string, mtime time.Time) {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	write("127.0.0.5 myhost.test Alias.test # comment\n::1 localhost\n127.0.0.1 localhost\n", time.Now().Add(-time.Hour))

	cases := []struct{ desc, host, want string }{
		{"canonical name", "myhost.test", "127.0.0.5"},
		{"alias, any case, trailing dot", "ALIAS.test.", "127.0.0.5"},
		{"name on two lines keeps both addresses", "localhost", "::1,127.0.0.1"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			if n := hitsAfter(f, func() {
				if got := mustLookup(t, r, tc.host); got != tc.want {
					t.Errorf("got %s, want %s", got, tc.want)
				}
			}); n != 0 {
				t.Errorf("%d DNS queries for a hosts-file name", n)
			}
		})
	}
	t.Run("file change is picked up after the check interval", func(t *testing.T) {
		write("127.0.0.6 myhost.test\n", time.Now())
		if got := mustLookup(t, r, "myhost.test"); got != "127.0.0.5" {
			t.Errorf("before the check interval got %s, want 127.0.0.5", got)
		}
		clk.Advance(5 * time.Second)
		if got := mustLookup(t, r, "myhost.test"); got != "127.0.0.6" {
			t.Errorf("after the check interval got %s, want 127.0.0.6", got)
		}
	})
}

func TestConcurrentLookupsCollapsed(t *testing.T) {
	f := newFakeDNS(t)
	f.set(t, "app.test", 30, "A 127.0.0.1")
	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release) // never leave handlers blocked, even on failure
	f.mu.Lock()
	f.gate = gate
	f.mu.Unlock()
	r, _, _ := newTestResolver(t, f, func(o *Options) { o.Timeout = 5 * time.Second })

	const n = 10
	results := make(chan string, n)
	for range n {
		go func() {
			addrs, err := r.LookupHost(context.Background(), "app.test")
			if err != nil {
				results <- err.Error()
				return
			}
			results <- addrs2str(addrs)
		}()
	}
	testutil.Eventually(t, 5*time.Second, "condition", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		c := r.calls["app.test"]
		return c != nil && c.waiters == n
	})
	release()
	for range n {
		if got := <-results; got != "127.0.0.1" {
			t.Errorf("got %s, want 127.0.0.1", got)
		}
	}
	if h := f.hits.Load(); h != 2 { // one A and one AAAA query
		t.Errorf("%d queries for %d concurrent lookups, want 2", h, n)
	}
}

func TestSearchDomainsAfterFullyQualifiedName(t *testing.T) {
	cases := []struct {
		desc    string
		records map[string]string
		want    string
	}{
		{"fully-qualified name wins", map[string]string{"backend": "A 127.0.0.7", "backend.svc.test": "A 127.0.0.4"}, "127.0.0.7"},
		{"search domain used when the name does not exist", map[string]string{"backend.svc.test": "A 127.0.0.4"}, "127.0.0.4"},
		{"trailing dot: no search domains", map[string]string{"backend.svc.test": "A 127.0.0.4"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			f := newFakeDNS(t)
			for name, rec := range tc.records {
				f.set(t, name, 30, rec)
			}
			r, _, _ := newTestResolver(t, f, func(o *Options) { o.Search = []string{"svc.test"} })
			host := "backend"
			if tc.want == "" {
				host = "backend."
			}
			addrs, err := r.LookupHost(context.Background(), host)
			if got := addrs2str(addrs); got != tc.want || (tc.want == "") != (err != nil) {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// listen opens a TCP listener whose accepted connections report its ip.
func listen(t *testing.T, ip, port string) (net.Listener, chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, port))
	if err != nil {
		t.Skipf("listen on %s: %v", ip, err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- ip
		}
	}()
	return ln, accepted
}

// dialTag dials addr and returns the ip of the listener that accepted.
func dialTag(t *testing.T, r *Resolver, network, addr string, accepted chan string) string {
	t.Helper()
	c, err := r.DialContext(context.Background(), network, addr)
	if err != nil {
		t.Fatalf("DialContext(%s): %v", addr, err)
	}
	defer c.Close()
	select {
	case ip := <-accepted:
		return ip
	case <-time.After(5 * time.Second):
		t.Fatal("no listener accepted")
		return ""
	}
}

// twoListeners listens on 127.0.0.1:P and 127.0.0.2:P (both loopback) and
// merges their accept reports.
func twoListeners(t *testing.T) (port string, accepted chan string) {
	ln1, acc1 := listen(t, "127.0.0.1", "0")
	_, port, _ = net.SplitHostPort(ln1.Addr().String())
	_, acc2 := listen(t, "127.0.0.2", port)
	accepted = make(chan string, 16)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	for _, acc := range []chan string{acc1, acc2} {
		go func() {
			for {
				select {
				case ip := <-acc:
					accepted <- ip
				case <-done:
					return
				}
			}
		}()
	}
	return port, accepted
}

func TestAddressChangeTakesEffectForNewConnections(t *testing.T) {
	port, accepted := twoListeners(t)
	f := newFakeDNS(t)
	f.set(t, "app.test", 10, "A 127.0.0.1")
	r, clk, _ := newTestResolver(t, f, nil)

	if got := dialTag(t, r, "tcp", "app.test:"+port, accepted); got != "127.0.0.1" {
		t.Fatalf("first connection went to %s, want 127.0.0.1", got)
	}
	f.set(t, "app.test", 10, "A 127.0.0.2")
	clk.Advance(11 * time.Second)
	// The first connection after the TTL may still use the old address; the
	// ones after the background refresh must use the new one.
	testutil.Eventually(t, 5*time.Second, "condition", func() bool { return dialTag(t, r, "tcp", "app.test:"+port, accepted) == "127.0.0.2" })
	if got := dialTag(t, r, "tcp", "app.test:"+port, accepted); got != "127.0.0.2" {
		t.Errorf("connection after the refresh went to %s, want 127.0.0.2", got)
	}
}

func TestDialSpreadsRoundRobin(t *testing.T) {
	port, accepted := twoListeners(t)
	f := newFakeDNS(t)
	f.set(t, "app.test", 30, "A 127.0.0.1", "A 127.0.0.2")
	r, _, _ := newTestResolver(t, f, nil)
	var got []string
	for range 4 {
		got = append(got, dialTag(t, r, "tcp", "app.test:"+port, accepted))
	}
	if want := "127.0.0.1 127.0.0.2 127.0.0.1 127.0.0.2"; strings.Join(got, " ") != want {
		t.Errorf("dial order %v, want %s", got, want)
	}
}

func TestDialFallsOverToNextAddress(t *testing.T) {
	ln, accepted := listen(t, "127.0.0.1", "0")
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if probe, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Skipf("127.0.0.2 not usable: %v", err)
	} else {
		probe.Close()
	}
	f := newFakeDNS(t)
	f.set(t, "app.test", 30, "A 127.0.0.2", "A 127.0.0.1") // nothing listens on 127.0.0.2:port
	f.set(t, "dead.test", 30, "A 127.0.0.2", "A 127.0.0.3")
	r, _, _ := newTestResolver(t, f, nil)

	if got := dialTag(t, r, "tcp", "app.test:"+port, accepted); got != "127.0.0.1" {
		t.Errorf("connected to %s, want 127.0.0.1", got)
	}
	if _, err := r.DialContext(context.Background(), "tcp", "dead.test:"+port); err == nil || !strings.HasPrefix(err.Error(), "dial dead.test: ") {
		t.Errorf("all addresses refusing: err = %v, want \"dial dead.test: ...\"", err)
	}
}

func TestDialFiltersAddressesByNetwork(t *testing.T) {
	ln, accepted := listen(t, "127.0.0.1", "0")
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	f := newFakeDNS(t)
	f.set(t, "app.test", 30, "AAAA 2001:db8::1", "A 127.0.0.1") // 2001:db8::/32 is unroutable documentation space
	r, _, _ := newTestResolver(t, f, func(o *Options) { o.Dialer = &net.Dialer{Timeout: time.Second} })
	for range 2 { // round-robin would hit the IPv6 address on one of two dials
		if got := dialTag(t, r, "tcp4", "app.test:"+port, accepted); got != "127.0.0.1" {
			t.Errorf("tcp4 dial went to %s", got)
		}
	}
	f.set(t, "v4only.test", 30, "A 127.0.0.1")
	if _, err := r.DialContext(context.Background(), "tcp6", "v4only.test:"+port); !errors.Is(err, ErrNoAddresses) {
		t.Errorf("tcp6 dial of an IPv4-only name: err = %v, want ErrNoAddresses", err)
	}
}

func TestNewDefaults(t *testing.T) {
	r := New(Options{})
	if len(r.servers) == 0 || r.opts.Timeout != 2*time.Second || r.opts.MinTTL != time.Second ||
		r.opts.MaxTTL != 5*time.Minute || r.opts.NegativeTTL != 5*time.Second || r.opts.HostsFile != "/etc/hosts" ||
		r.opts.Dialer.Timeout != 5*time.Second || r.opts.Dialer.KeepAlive != 30*time.Second {
		t.Errorf("defaults not applied: servers=%v opts=%+v", r.servers, r.opts)
	}
	if got := New(Options{Servers: []string{"127.0.0.1"}}).servers; len(got) != 1 || got[0] != "127.0.0.1:53" {
		t.Errorf("server without port: %v, want 127.0.0.1:53", got)
	}
}

func addrs2str(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}
