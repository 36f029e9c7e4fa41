package cluster

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkPlan50 plans for a 50-node fleet with 5 voters, two of them dead.
func BenchmarkPlan50(b *testing.B) {
	var servers []RaftServer
	var members []Member
	for i := range 50 {
		id := fmt.Sprintf("n%02d", i)
		s := nv(id)
		s.Voter = i < 5
		servers = append(servers, s)
		m := healthyMem(id)
		if i == 1 || i == 2 {
			m = mem(id, StateDead, time.Minute)
		}
		members = append(members, m)
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(Plan("n00", servers, members, leaderIdx, pol, t0)) != 4 {
			b.Fatal("unexpected plan")
		}
	}
}

// BenchmarkFormationVote7 is one vote and one BootstrapSet of a node among 7.
func BenchmarkFormationVote7(b *testing.B) {
	var members []Member
	for i := range 7 {
		members = append(members, voted(fresh(fmt.Sprintf("n%d", i), 5), "n0,n1,n2,n3,n4", phaseProposed))
	}
	self := members[0]
	b.ReportAllocs()
	for b.Loop() {
		formationVote(self, members, 5)
		BootstrapSet(self, members, 5)
	}
}

func BenchmarkDecodeMeta(b *testing.B) {
	enc, _ := encodeMeta(Meta{ID: "tether-3", RaftAddr: "10.0.0.13:7000", AdminAddr: "127.0.0.1:9901",
		Version: "1.0.0", ClusterID: "0123456789abcdef", HasState: true, Expect: 3, Durable: 123456})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeMeta(enc); err != nil {
			b.Fatal(err)
		}
	}
}
