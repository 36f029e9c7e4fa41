package cluster

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestPlanInvariantsOnRandomFleets checks, over random configurations and
// gossip states, what every plan must respect, and that repeated rounds
// settle (no oscillation).
func TestPlanInvariantsOnRandomFleets(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for trial := range 400 {
		n := 1 + r.IntN(25)
		p := Policy{MaxVoters: []int{1, 3, 5, 7}[r.IntN(4)], Expect: r.IntN(4), ReapTimeout: time.Hour, MaxLag: 10, Stabilization: 10 * time.Second}
		var servers []RaftServer
		var members []Member
		for i := range n {
			id := fmt.Sprintf("n%02d", i)
			inConfig := i == 0 || r.IntN(4) > 0
			if inConfig {
				servers = append(servers, RaftServer{ID: id, Address: id + ":7000", Voter: i == 0 || r.IntN(2) == 0})
			}
			if i > 0 && r.IntN(10) == 0 {
				continue // unknown to gossip
			}
			m := Member{Meta: Meta{ID: id, RaftAddr: id + ":7000", Durable: leaderIdx - uint64(r.IntN(20))}}
			switch x := r.IntN(10); {
			case i == 0 || x < 5:
				m.State, m.Since = StateAlive, t0.Add(-time.Duration(r.IntN(30))*time.Second)
			case x < 6:
				m.State, m.Since = StateSuspect, t0.Add(-time.Minute)
			case x < 8:
				m.State, m.Since = StateDead, t0.Add(-time.Duration(r.IntN(120))*time.Minute)
			default:
				m.State, m.Since = StateLeft, t0.Add(-time.Minute)
			}
			if i == 0 {
				m.Since = t0.Add(-time.Hour)
			}
			members = append(members, m)
		}
		desc := fmt.Sprintf("trial %d: policy %+v, servers %v, members %s", trial, p, servers, memberStates(members))
		f := newFakeRaft(servers...)
		byID := map[string]Member{}
		for _, m := range members {
			byID[m.ID] = m
		}
		settled := false
		for round := range 10 {
			before, _ := f.Servers()
			plan := Plan("n00", before, members, leaderIdx, p, t0)
			if len(plan) == 0 {
				settled = true
				break
			}
			voters := 0
			cfg := map[string]RaftServer{}
			for _, s := range before {
				cfg[s.ID] = s
				if s.Voter {
					voters++
				}
			}
			removedVoters := 0
			for _, a := range plan {
				s, in := cfg[a.ID]
				switch a.Kind {
				case AddNonvoter:
					m := byID[a.ID]
					if m.State != StateAlive || a.Address != m.RaftAddr || (in && s.Address == a.Address) {
						t.Fatalf("%s\nround %d: %s of a member %+v", desc, round, a, m)
					}
				case Promote:
					if !in {
						t.Fatalf("%s\nround %d: %s of a server not in the configuration", desc, round, a)
					}
					if s.Voter && s.Address == a.Address {
						t.Fatalf("%s\nround %d: %s promotes a voter", desc, round, a)
					}
				case Demote:
					if !in || !s.Voter || a.ID == "n00" {
						t.Fatalf("%s\nround %d: %s demotes %+v", desc, round, a, s)
					}
				case Remove:
					if !in || a.ID == "n00" {
						t.Fatalf("%s\nround %d: %s removes %+v", desc, round, a, s)
					}
					if s.Voter {
						removedVoters++
					}
				}
			}
			if removedVoters > (voters-1)/2 {
				t.Fatalf("%s\nround %d: removes %d of %d voters: %s", desc, round, removedVoters, voters, planString(plan))
			}
			if err := apply(f, plan, nil, nil); err != nil {
				t.Fatal(err)
			}
			after, _ := f.Servers()
			va := 0
			for _, s := range after {
				if s.Voter {
					va++
				}
			}
			if va < min(voters, p.Expect) && removedVoters > 0 {
				t.Fatalf("%s\nround %d: voters %d -> %d below Expect %d: %s", desc, round, voters, va, p.Expect, planString(plan))
			}
			if va > max(voters, p.withDefaults().MaxVoters) {
				t.Fatalf("%s\nround %d: voters %d -> %d above MaxVoters %d: %s", desc, round, voters, va, p.MaxVoters, planString(plan))
			}
		}
		if !settled {
			t.Fatalf("%s\ndoes not settle in 10 rounds", desc)
		}
	}
}

func memberStates(ms []Member) string {
	var out []string
	for _, m := range ms {
		out = append(out, fmt.Sprintf("%s=%s", m.ID, m.State))
	}
	return strings.Join(out, " ")
}
