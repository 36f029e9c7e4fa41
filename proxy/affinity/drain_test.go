package affinity

import (
	"testing"
	"time"
)

// TestDrainingKeepsExistingSessionsUntilDeadline: a draining destination
// gets no new sessions but serves its affinitized ones until its drain
// deadline; after it, they redistribute.
func TestDrainingKeepsExistingSessionsUntilDeadline(t *testing.T) {
	c := cluster("c", dest("a"), dest("b"), dest("c"))
	p := mustNew(t, "c", enabled("HashCookie", "K"), c, nil)
	deadline := t0.Add(5 * time.Minute)
	c.Destination("b").SetDraining(deadline)
	sess := request("Cookie: K=" + refHashCookie("b"))
	for _, tc := range []struct {
		desc    string
		req     bool // carries b's session
		at      time.Time
		outcome Outcome
		wantB   bool
	}{
		{"new session: the draining destination is not a candidate", false, t0, NoSession, false},
		{"existing session before the deadline stays on it", true, t0.Add(time.Minute), Routed, true},
		{"existing session at the deadline redistributes", true, deadline, FailedOpen, false},
		{"existing session after the deadline redistributes", true, deadline.Add(time.Hour), FailedOpen, false},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			r := request()
			if tc.req {
				r = sess
			}
			d := p.Resolve(r, c, tc.at, nil)
			hasB := false
			for _, x := range d.Candidates {
				hasB = hasB || x.ID == "b"
			}
			if d.Outcome != tc.outcome || hasB != tc.wantB || len(d.Candidates) == 0 {
				t.Fatalf("outcome %v candidates %v; want %v, b included=%v", d.Outcome, ids(d.Candidates), tc.outcome, tc.wantB)
			}
			if tc.outcome == FailedOpen && d.Candidates[0].ID != refRendezvous(refHashCookie("b"), c, tc.at) {
				t.Fatalf("redistributed to %v, not the rendezvous choice", ids(d.Candidates))
			}
		})
	}
}
