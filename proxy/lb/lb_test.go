package lb

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// dest builds a fake destination with n requests in flight.
func dest(id string, inflight int) *upstream.Destination {
	d := upstream.NewDestination(id, nil, nil, "", nil)
	for range inflight {
		d.Begin()
	}
	return d
}

func mustNew(t testing.TB, name string) Policy {
	t.Helper()
	p, err := New(name)
	if err != nil {
		t.Fatalf("New(%q): %v", name, err)
	}
	return p
}

// counts picks p n times over c and tallies the chosen IDs.
func counts(p Policy, c []*upstream.Destination, n int) map[string]int {
	got := map[string]int{}
	for range n {
		got[p.Pick(nil, c).ID]++
	}
	return got
}

func TestNewNames(t *testing.T) {
	tests := []struct {
		desc, name string
		want       Policy
	}{
		{"empty name is PowerOfTwoChoices (YARP default)", "", powerOfTwoChoices{}},
		{"PowerOfTwoChoices", "PowerOfTwoChoices", powerOfTwoChoices{}},
		{"RoundRobin", "RoundRobin", &roundRobin{}},
		{"LeastRequests", "LeastRequests", leastRequests{}},
		{"Random", "Random", random{}},
		{"FirstAlphabetical", "FirstAlphabetical", firstAlphabetical{}},
		{"names match case-insensitively", "roundrobin", &roundRobin{}},
		{"upper case matches too", "FIRSTALPHABETICAL", firstAlphabetical{}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			p := mustNew(t, tt.name)
			if got, want := fmt.Sprintf("%T", p), fmt.Sprintf("%T", tt.want); got != want {
				t.Fatalf("New(%q) = %s, want %s", tt.name, got, want)
			}
		})
	}
}

func TestNewUnknownNameIsAnErrorNamingItAndTheValidNames(t *testing.T) {
	p, err := New("LeastConnections")
	if err == nil {
		t.Fatalf("New(LeastConnections) = %T, want error", p)
	}
	for _, want := range append(Names(), `"LeastConnections"`) {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestNewReturnsIndependentRoundRobins(t *testing.T) {
	// One counter per cluster: a second cluster must not shift the first.
	c := []*upstream.Destination{dest("a", 0), dest("b", 0)}
	p1, p2 := mustNew(t, RoundRobin), mustNew(t, RoundRobin)
	p1.Pick(nil, c)
	if got := p2.Pick(nil, c).ID; got != "a" {
		t.Fatalf("fresh RoundRobin started at %q, want a", got)
	}
}

func TestPickRules(t *testing.T) {
	tests := []struct {
		desc   string
		policy string
		cands  []*upstream.Destination
		picks  int
		// want holds the exact tally expected; wantNever the IDs that must
		// never be chosen; wantAll requires every candidate at least minEach.
		want      map[string]int
		wantNever []string
		minEach   int
	}{
		{
			desc: "LeastRequests picks the least loaded", policy: LeastRequests,
			cands: []*upstream.Destination{dest("a", 3), dest("b", 1), dest("c", 2)},
			picks: 50, want: map[string]int{"b": 50},
		},
		{
			desc: "LeastRequests breaks ties with the first candidate", policy: LeastRequests,
			cands: []*upstream.Destination{dest("c", 5), dest("a", 1), dest("b", 1)},
			picks: 50, want: map[string]int{"a": 50},
		},
		{
			desc: "PowerOfTwoChoices never picks the more loaded of two (the two are distinct)", policy: PowerOfTwoChoices,
			cands: []*upstream.Destination{dest("a", 5), dest("b", 0)},
			picks: 2000, want: map[string]int{"b": 2000},
		},
		{
			desc: "PowerOfTwoChoices never picks the most loaded of many", policy: PowerOfTwoChoices,
			cands: []*upstream.Destination{dest("a", 1), dest("b", 9), dest("c", 2), dest("d", 0)},
			picks: 2000, wantNever: []string{"b"}, minEach: 1,
		},
		{
			desc: "PowerOfTwoChoices spreads over equally loaded candidates", policy: PowerOfTwoChoices,
			cands: []*upstream.Destination{dest("a", 0), dest("b", 0), dest("c", 0)},
			picks: 3000, minEach: 700,
		},
		{
			desc: "RoundRobin visits all evenly", policy: RoundRobin,
			cands: []*upstream.Destination{dest("a", 9), dest("b", 0), dest("c", 4)},
			picks: 300, want: map[string]int{"a": 100, "b": 100, "c": 100},
		},
		{
			desc: "Random reaches every candidate", policy: Random,
			cands: []*upstream.Destination{dest("a", 0), dest("b", 7), dest("c", 0)},
			picks: 3000, minEach: 700,
		},
		{
			desc: "FirstAlphabetical picks the lowest ID of unsorted candidates", policy: FirstAlphabetical,
			cands: []*upstream.Destination{dest("c", 0), dest("b", 9), dest("d", 0)},
			picks: 20, want: map[string]int{"b": 20},
		},
		{
			desc: "FirstAlphabetical compares IDs ignoring case (YARP OrdinalIgnoreCase)", policy: FirstAlphabetical,
			cands: []*upstream.Destination{dest("a2", 0), dest("B1", 0), dest("A10", 0)},
			picks: 20, want: map[string]int{"A10": 20},
		},
		{
			desc: "FirstAlphabetical sorts a prefix first", policy: FirstAlphabetical,
			cands: []*upstream.Destination{dest("app-10", 0), dest("app-1", 0), dest("Ä", 0)},
			picks: 20, want: map[string]int{"app-1": 20},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got := counts(mustNew(t, tt.policy), tt.cands, tt.picks)
			if tt.want != nil && fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("tally = %v, want %v", got, tt.want)
			}
			for _, id := range tt.wantNever {
				if got[id] != 0 {
					t.Errorf("picked %q %d times, want never (tally %v)", id, got[id], got)
				}
			}
			if tt.minEach > 0 {
				for _, d := range tt.cands {
					if slicesContains(tt.wantNever, d.ID) {
						continue
					}
					if got[d.ID] < tt.minEach {
						t.Errorf("picked %q %d times, want at least %d (tally %v)", d.ID, got[d.ID], tt.minEach, got)
					}
				}
			}
		})
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestSingleCandidateIsReturned(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			only := dest("only", 3)
			c := []*upstream.Destination{only}
			p := mustNew(t, name)
			for range 10 {
				if got := p.Pick(nil, c); got != only {
					t.Fatalf("Pick = %v, want the only candidate", got.ID)
				}
			}
		})
	}
}

func TestRoundRobinIsEvenUnderConcurrency(t *testing.T) {
	c := []*upstream.Destination{dest("a", 0), dest("b", 0), dest("c", 0)}
	p := mustNew(t, RoundRobin)
	const workers, each = 4, 300
	var mu sync.Mutex
	total := map[string]int{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			got := counts(p, c, each)
			mu.Lock()
			defer mu.Unlock()
			for k, v := range got {
				total[k] += v
			}
		})
	}
	wg.Wait()
	for _, d := range c {
		if total[d.ID] != workers*each/len(c) {
			t.Fatalf("tally %v, want %d each", total, workers*each/len(c))
		}
	}
}

func TestPickDoesNotAllocate(t *testing.T) {
	for _, name := range Names() {
		for _, n := range []int{1, 3, 100} {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				c := candidates(n)
				p := mustNew(t, name)
				if a := testing.AllocsPerRun(100, func() { p.Pick(nil, c) }); a != 0 {
					t.Fatalf("Pick allocates %.1f times per call, want 0", a)
				}
			})
		}
	}
}

func TestCompareFold(t *testing.T) {
	tests := []struct {
		desc string
		a, b string
		want int
	}{
		{"equal", "abc", "abc", 0},
		{"equal ignoring ASCII case", "ABC", "abc", 0},
		{"equal ignoring non-ASCII case", "äb", "ÄB", 0},
		{"lower first", "a", "b", -1},
		{"case does not order", "B", "a", 1},
		{"prefix first", "ab", "abc", -1},
		{"longer after", "abc", "ab", 1},
		{"empty first", "", "a", -1},
		{"shared prefix skipped, rest folded", "dest-0a", "DEST-0B", -1},
		{"shared multibyte prefix", "éa", "éB", -1},
		{"runes differing in a continuation byte", "é", "è", 1},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if got := compareFold(tt.a, tt.b); got != tt.want {
				t.Fatalf("compareFold(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
			}
		})
	}
}

func candidates(n int) []*upstream.Destination {
	c := make([]*upstream.Destination, n)
	for i := range c {
		c[i] = dest(fmt.Sprintf("dest-%03d", i), (i*7)%5)
	}
	return c
}

func BenchmarkPick(b *testing.B) {
	for _, name := range Names() {
		for _, n := range []int{3, 100} {
			b.Run(fmt.Sprintf("%s/%d", name, n), func(b *testing.B) {
				c := candidates(n)
				p := mustNew(b, name)
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						p.Pick(nil, c)
					}
				})
			})
		}
	}
}
