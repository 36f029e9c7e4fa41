package upstream

import (
	"net/url"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newDest(id string) *Destination {
	u, _ := url.Parse("http://127.0.0.1:1/")
	return NewDestination(id, u, nil, "", nil)
}

func TestAcceptRules(t *testing.T) {
	cases := []struct {
		desc          string
		setup         func(d *Destination)
		at            time.Time
		wantNew       bool
		wantExisting  bool
		wantAvailable bool
	}{
		{desc: "unknown health counts as available (YARP)", setup: func(d *Destination) {}, at: t0, wantNew: true, wantExisting: true},
		{desc: "healthy takes new and existing", setup: func(d *Destination) { d.SetActiveHealth(Healthy) }, at: t0, wantNew: true, wantExisting: true},
		{desc: "unhealthy takes nothing", setup: func(d *Destination) { d.SetActiveHealth(Unhealthy) }, at: t0},
		{desc: "passive exclusion takes nothing until it runs out", setup: func(d *Destination) { d.MarkPassiveFailure(t0.Add(time.Minute)) }, at: t0},
		{desc: "passive exclusion over: available again", setup: func(d *Destination) { d.MarkPassiveFailure(t0.Add(time.Minute)) }, at: t0.Add(time.Minute), wantNew: true, wantExisting: true},
		{desc: "draining: no new sessions, existing ones until the deadline", setup: func(d *Destination) { d.SetDraining(t0.Add(time.Minute)) }, at: t0, wantExisting: true},
		{desc: "drain deadline passed: nothing", setup: func(d *Destination) { d.SetDraining(t0.Add(time.Minute)) }, at: t0.Add(time.Minute)},
		{desc: "draining and unhealthy: nothing", setup: func(d *Destination) { d.SetDraining(t0.Add(time.Minute)); d.SetActiveHealth(Unhealthy) }, at: t0},
		{desc: "drain undone: available", setup: func(d *Destination) { d.SetDraining(t0.Add(time.Minute)); d.SetDraining(time.Time{}) }, at: t0, wantNew: true, wantExisting: true},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			d := newDest("d")
			cl := NewCluster("c", []*Destination{d})
			cl.Available(t0) // prime the cache so the state change must invalidate it
			c.setup(d)
			if got := d.AcceptsNew(c.at); got != c.wantNew {
				t.Errorf("AcceptsNew = %v, want %v", got, c.wantNew)
			}
			if got := d.AcceptsExisting(c.at); got != c.wantExisting {
				t.Errorf("AcceptsExisting = %v, want %v", got, c.wantExisting)
			}
			if got := len(cl.Available(c.at)) == 1; got != c.wantNew {
				t.Errorf("in Available = %v, want %v", got, c.wantNew)
			}
		})
	}
}

func TestAvailableIsCachedUntilStateChanges(t *testing.T) {
	a, b := newDest("a"), newDest("b")
	cl := NewCluster("c", []*Destination{b, a})
	first := cl.Available(t0)
	if len(first) != 2 || first[0].ID != "a" {
		t.Fatalf("Available = %v, want a, b sorted", first)
	}
	if again := cl.Available(t0.Add(time.Hour)); &again[0] != &first[0] {
		t.Fatal("Available rebuilt its list without a state change")
	}
	b.SetActiveHealth(Healthy) // unknown -> healthy: availability unchanged, list may be rebuilt
	a.SetActiveHealth(Unhealthy)
	if got := cl.Available(t0); len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("after a turned unhealthy: %v", got)
	}
	b.MarkPassiveFailure(t0.Add(time.Second))
	if got := cl.Available(t0); len(got) != 0 {
		t.Fatalf("after b's passive failure: %d available", len(got))
	}
	if got := cl.Available(t0.Add(time.Second)); len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("after b's exclusion ran out: %v", got)
	}
}

func TestAffinityKeyFromMetadata(t *testing.T) {
	u, _ := url.Parse("http://x/")
	if d := NewDestination("d1", u, nil, "", map[string]string{"AffinityKey": "group"}); d.AffinityKey != "group" || d.HealthAddress != u {
		t.Fatalf("AffinityKey %q HealthAddress %v", d.AffinityKey, d.HealthAddress)
	}
	if d := NewDestination("d1", u, nil, "", nil); d.AffinityKey != "d1" {
		t.Fatalf("AffinityKey %q, want the id", d.AffinityKey)
	}
}

func BenchmarkAvailable(b *testing.B) {
	ds := make([]*Destination, 10000)
	for i := range ds {
		ds[i] = newDest(string(rune('a'+i%26)) + string(rune(i)))
	}
	cl := NewCluster("c", ds)
	b.ReportAllocs()
	for b.Loop() {
		_ = cl.Available(t0)
	}
}
