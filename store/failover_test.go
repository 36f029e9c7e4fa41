package store

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkLeaderFailover measures, with the default LAN timings, the time
// from the leader stopping abruptly (raft.Shutdown: no leadership transfer,
// connections dropped, as after kill -9) to the other two nodes agreeing on
// a new leader. Each iteration is one trial; it reports p50/p99 and the
// elections seen while no node was stopped (spurious ones):
//
//	go test -run '^$' -bench LeaderFailover -benchtime 20x ./store
func BenchmarkLeaderFailover(b *testing.B) {
	c := newTestCluster(b, 3, knobs{})
	for _, nd := range c.nodes { // restart them with LAN timings
		c.stop(nd)
	}
	c.timing = LANTiming()
	for _, nd := range c.nodes {
		c.start(nd)
	}
	c.bootstrap()
	c.leader()
	var trials []time.Duration
	spurious := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		old := c.leader()
		// Steady state for a few heartbeats: no election may start.
		terms := c.terms()
		steady := time.Now().Add(time.Second)
		for time.Now().Before(steady) {
			time.Sleep(50 * time.Millisecond) // sampling a period, not waiting for a condition
		}
		if !slices.Equal(terms, c.terms()) {
			spurious++
		}
		var rest []*testNode
		for _, nd := range c.nodes {
			if nd != old {
				rest = append(rest, nd)
			}
		}
		start := time.Now()
		old.s.Shutdown()
		c.leader(rest...)
		trials = append(trials, time.Since(start))
		c.start(old)
		c.leader()
	}
	b.StopTimer()
	slices.Sort(trials)
	pct := func(p float64) time.Duration { return trials[min(len(trials)-1, int(p*float64(len(trials))))] }
	b.ReportMetric(float64(pct(0.50).Milliseconds()), "p50-ms")
	b.ReportMetric(float64(pct(0.99).Milliseconds()), "p99-ms")
	b.ReportMetric(float64(trials[len(trials)-1].Milliseconds()), "max-ms")
	b.ReportMetric(float64(spurious), "spurious-elections")
	b.ReportMetric(0, "ns/op")
}

// terms is every node's current term.
func (c *testCluster) terms() []uint64 {
	var out []uint64
	for _, nd := range c.nodes {
		out = append(out, nd.s.raft.CurrentTerm())
	}
	return out
}

// BenchmarkJoinToVoter measures, with LAN timings, the time from a leader's
// AddNonvoter of a fresh node to that node being a caught-up voter
// (AddNonvoter, wait until it applied the leader's commit index, AddVoter):
//
//	go test -run '^$' -bench JoinToVoter -benchtime 20x ./store
func BenchmarkJoinToVoter(b *testing.B) {
	c := newTestCluster(b, 3, knobs{})
	for _, nd := range c.nodes {
		c.stop(nd)
	}
	c.timing = LANTiming()
	for _, nd := range c.nodes {
		c.start(nd)
	}
	c.bootstrap()
	core := c.nodes
	c.apply(InstallKey{Key: testKey("k1", 0)}, core...)
	var trials []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		nd := c.addNode()
		b.StartTimer()
		start := time.Now()
		l := c.leader(core...)
		if err := l.s.AddNonvoter(nd.id, nd.s.Addr()); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := nd.s.WaitApplied(ctx, l.s.CommitIndex())
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		if err := l.s.AddVoter(nd.id, nd.s.Addr()); err != nil {
			b.Fatal(err)
		}
		trials = append(trials, time.Since(start))
		b.StopTimer()
		if err := l.s.RemoveServer(nd.id); err != nil {
			b.Fatal(err)
		}
		c.stop(nd)
		c.nodes = c.nodes[:len(c.nodes)-1]
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(trials)
	pct := func(p float64) time.Duration { return trials[min(len(trials)-1, int(p*float64(len(trials))))] }
	b.ReportMetric(float64(pct(0.50).Milliseconds()), "p50-ms")
	b.ReportMetric(float64(pct(0.99).Milliseconds()), "p99-ms")
	b.ReportMetric(0, "ns/op")
}
