package chaos

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"
)

// sealed makes a value in the keyring's wire form carrying key id.
func sealed(id string) string {
	raw := append([]byte{1, byte(len(id))}, id...)
	raw = append(raw, make([]byte, 28)...)
	return base64.RawURLEncoding.EncodeToString(raw)
}

func TestKeyIDOfReadsTheSealedValue(t *testing.T) {
	for _, c := range []struct{ desc, in, want string }{
		{"a value", sealed("k-123"), "k-123"},
		{"not base64", "%%%", ""},
		{"too short", base64.RawURLEncoding.EncodeToString([]byte{1, 9, 'a'}), ""},
	} {
		if got := keyIDOf(c.in); got != c.want {
			t.Errorf("%s: keyIDOf = %q, want %q", c.desc, got, c.want)
		}
	}
}

// TestCheckerFindsEachViolation: each rule on a small history that breaks
// it, and on one that comes close without breaking it.
func TestCheckerFindsEachViolation(t *testing.T) {
	at := func(s float64) time.Time {
		return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(s * float64(time.Second)))
	}
	final := func(keys map[string]string, drains map[string]bool) map[string]Final {
		return map[string]Final{"n1": {Keys: keys, Drains: drains}, "n2": {Keys: keys, Drains: drains}}
	}
	both := map[string]string{"k1": "active", "k2": "inactive"}
	noDrain := map[string]bool{"d1": false}
	cases := []struct {
		desc string
		h    History
		want string // the rules broken, joined by "|"
	}{
		{"an acknowledged key on every node: nothing",
			History{Ops: []Op{{Kind: "rotate", Type: "ok", Result: "k2", Names: []string{"k2"}, Start: at(1), End: at(2)}}, Final: final(both, noDrain)}, ""},
		{"an acknowledged key missing on one node",
			History{Ops: []Op{{Kind: "rotate", Type: "ok", Result: "k2", Names: []string{"k2"}, Start: at(1), End: at(2)}},
				Final: map[string]Final{"n1": {Keys: both, Drains: noDrain}, "n2": {Keys: map[string]string{"k1": "active"}, Drains: noDrain}}}, RuleLostWrite},
		{"an unacknowledged rotation that did not happen: nothing",
			History{Ops: []Op{{Kind: "rotate", Type: "info", Start: at(1), End: at(2)}}, Final: final(both, noDrain)}, ""},
		{"an acknowledged revocation not revoked everywhere",
			History{Ops: []Op{{Kind: "revoke", Type: "ok", Arg: "k2", Start: at(1), End: at(2)}},
				Final: map[string]Final{"n1": {Keys: map[string]string{"k1": "active", "k2": "revoked"}, Drains: noDrain}, "n2": {Keys: both, Drains: noDrain}}}, RuleLostWrite},
		{"the last acknowledged drain lost",
			History{Ops: []Op{{Kind: "drain", Type: "ok", Arg: "d1", Start: at(1), End: at(2)}}, Final: final(both, noDrain)}, RuleLostWrite},
		{"a drain followed by an undrain of unknown outcome: not settled, nothing",
			History{Ops: []Op{{Kind: "drain", Type: "ok", Arg: "d1", Start: at(1), End: at(2)}, {Kind: "undrain", Type: "info", Arg: "d1", Start: at(3), End: at(4)}},
				Final: final(both, noDrain)}, ""},
		{"a drain followed by a refused undrain: settled, the drain must hold",
			History{Ops: []Op{{Kind: "drain", Type: "ok", Arg: "d1", Start: at(1), End: at(2)}, {Kind: "undrain", Type: "fail", Arg: "d1", Start: at(3), End: at(4)}},
				Final: final(both, noDrain)}, RuleLostWrite},
		{"a value a clean node cannot open",
			History{Ops: []Op{{Kind: "open", Type: "fail", Clean: true, Cookie: sealed("k1"), Start: at(1), End: at(2)}}, Final: final(both, noDrain)}, RuleUnopenable},
		{"a value that does not open on a node cut off from the leader: nothing",
			History{Ops: []Op{{Kind: "open", Type: "fail", Clean: false, Cookie: sealed("k1"), Start: at(1), End: at(2)}}, Final: final(both, noDrain)}, ""},
		{"a value whose key a revocation was sent for before: nothing",
			History{Ops: []Op{{Kind: "revoke", Type: "info", Arg: "k1", Start: at(1), End: at(5)}, {Kind: "open", Type: "fail", Clean: true, Cookie: sealed("k1"), Start: at(2), End: at(3)}},
				Final: final(both, noDrain)}, ""},
		{"a value whose key was revoked only after the open failed",
			History{Ops: []Op{{Kind: "open", Type: "fail", Clean: true, Cookie: sealed("k1"), Start: at(2), End: at(3)}, {Kind: "revoke", Type: "info", Arg: "k1", Start: at(4), End: at(5)}},
				Final: final(both, noDrain)}, RuleUnopenable},
		{"a sealed value under a key no node holds at the end",
			History{Ops: []Op{{Kind: "seal", Type: "ok", Cookie: sealed("k9"), Names: []string{"k9"}, Start: at(1), End: at(2)}}, Final: final(both, noDrain)}, RuleUncommitted},
		{"two leaders in one term",
			History{Status: []Sample{{At: at(1), Node: "n1", Term: 5, State: "Leader"}, {At: at(2), Node: "n2", Term: 5, State: "Leader"}}, Final: final(both, noDrain)}, RuleTwoLeaders},
		{"one leader per term",
			History{Status: []Sample{{At: at(1), Node: "n1", Term: 5, State: "Leader"}, {At: at(2), Node: "n2", Term: 6, State: "Leader"}, {At: at(2), Node: "n1", Term: 6, State: "Follower"}},
				Final: final(both, noDrain)}, ""},
		{"a voter set changed to one without a live majority",
			History{Voters: []VoterSample{
				{At: at(1), Voters: []string{"a", "b", "c"}, Live: map[string]bool{"a": true, "b": true, "c": true}},
				{At: at(2), Voters: []string{"a", "d", "e"}, Live: map[string]bool{"a": true, "b": true, "c": true}}}, Final: final(both, noDrain)}, RuleQuorumLost},
		{"a failed voter replaced by a live one: nothing",
			History{Voters: []VoterSample{
				{At: at(1), Voters: []string{"a", "b", "c"}, Live: map[string]bool{"a": true, "b": true}},
				{At: at(2), Voters: []string{"a", "b", "d"}, Live: map[string]bool{"a": true, "b": true, "d": true}}}, Final: final(both, noDrain)}, ""},
		{"a set that had already lost its majority to faults: nothing",
			History{Voters: []VoterSample{
				{At: at(1), Voters: []string{"a", "b", "c"}, Live: map[string]bool{"a": true}},
				{At: at(2), Voters: []string{"a", "b", "d"}, Live: map[string]bool{"a": true}}}, Final: final(both, noDrain)}, ""},
	}
	for i := range cases {
		c := &cases[i]
		var got []string
		for _, v := range Check(&c.h) {
			if len(got) == 0 || got[len(got)-1] != v.Rule { // one per node is one rule
				got = append(got, v.Rule)
			}
		}
		if strings.Join(got, "|") != c.want {
			t.Errorf("%s: violations %q, want %q", c.desc, got, c.want)
		}
	}
}

// TestModelFindsEachViolation: each rule of the model check on a small
// history that breaks it, and on one that comes close without breaking it.
func TestModelFindsEachViolation(t *testing.T) {
	at := func(s float64) time.Time {
		return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(s * float64(time.Second)))
	}
	op := func(c int, kind, node, typ string, s, e float64) Op {
		return Op{Client: c, Kind: kind, Node: node, Type: typ, Start: at(s), End: at(e), Clean: true, Epoch: 1}
	}
	with := func(o Op, f func(*Op)) Op { f(&o); return o }
	read := func(c int, node string, s float64, keys map[string]string) Op {
		return with(op(c, "read", node, "ok", s, s+0.01), func(o *Op) { o.Keys = keys })
	}
	dests := func(c int, node string, s float64, d1 bool) Op {
		return with(op(c, "dests", node, "ok", s, s+0.01), func(o *Op) { o.Drains = map[string]bool{"d1": d1} })
	}
	rotate := func(c int, node string, s float64, id string) Op {
		return with(op(c, "rotate", node, "ok", s, s+0.1), func(o *Op) { o.Result = id })
	}
	// Writes of unknown outcome go to a node cut off (they do not count
	// against the availability budget here).
	revoke := func(c int, node, typ string, s float64, id string) Op {
		return with(op(c, "revoke", node, typ, s, s+0.1), func(o *Op) { o.Arg, o.Clean = id, typ == "ok" })
	}
	drain := func(c int, kind, typ string, s float64) Op {
		return with(op(c, kind, "n1", typ, s, s+0.1), func(o *Op) { o.Arg, o.Clean = "d1", typ == "ok" })
	}
	seal := func(s float64, dest string) Op {
		return with(op(3, "seal", "n2", "ok", s, s+0.01), func(o *Op) { o.Result, o.Status = dest, 200 })
	}
	openRevoked := func(s float64, typ string) Op {
		return with(op(3, "open-revoked", "n2", typ, s, s+0.01), func(o *Op) { o.Cookie = sealed("k1") })
	}
	cases := []struct {
		desc string
		ops  []Op
		want string // the rules broken, joined by "|"
	}{
		{"a rotation then a read that lists its key: nothing",
			[]Op{rotate(0, "n1", 1, "k2"), read(1, "n2", 2, map[string]string{"k2": "installed"})}, ""},
		{"a read lists a client's key before its rotation was sent",
			[]Op{read(1, "n2", 1, map[string]string{"k2": "installed"}), rotate(0, "n1", 5, "k2")}, RuleNotLinearizable},
		{"a key listed, then no longer listed",
			[]Op{read(1, "n2", 1, map[string]string{"k1": "active"}), read(2, "n3", 5, map[string]string{})}, RuleNotLinearizable},
		{"a key revoked, then read active long after",
			[]Op{revoke(0, "n1", "ok", 1, "k1"), read(1, "n2", 5, map[string]string{"k1": "active"})}, RuleNotLinearizable},
		{"a key revoked, read active by another node within the read bound: nothing",
			[]Op{read(2, "n3", 0, map[string]string{"k1": "active"}), revoke(0, "n1", "ok", 1, "k1"), read(1, "n2", 1.5, map[string]string{"k1": "active"})}, ""},
		{"a revocation of unknown outcome, read revoked: nothing",
			[]Op{read(2, "n3", 0, map[string]string{"k1": "inactive"}), revoke(0, "n1", "info", 1, "k1"), read(1, "n2", 9, map[string]string{"k1": "revoked"})}, ""},
		{"revoked with no revocation sent",
			[]Op{read(2, "n3", 0, map[string]string{"k1": "inactive"}), read(1, "n2", 9, map[string]string{"k1": "revoked"})}, RuleNotLinearizable},
		{"an active key read installed again",
			[]Op{read(2, "n3", 0, map[string]string{"k1": "active"}), read(1, "n2", 9, map[string]string{"k1": "installed"})}, RuleNotLinearizable},
		{"a drain of unknown outcome that took effect late: nothing",
			[]Op{drain(0, "drain", "info", 1), dests(1, "n2", 5, false), dests(1, "n2", 9, true)}, ""},
		{"a drain read back as drained, then undrained with no write",
			[]Op{drain(0, "drain", "ok", 1), dests(1, "n2", 5, true), dests(2, "n3", 9, false)}, RuleNotLinearizable},
		{"a read on a node cut off from the leader is not judged: nothing",
			[]Op{drain(0, "drain", "ok", 1), with(dests(2, "n3", 9, false), func(o *Op) { o.Clean = false })}, ""},
		{"the client's own drain missing on the node that answered it (within the read bound: read-your-writes only)",
			[]Op{drain(0, "drain", "ok", 1), dests(0, "n1", 1.1, false)}, RuleReadYourWrites},
		{"the client's own drain missing on another node without an index: judged by the model only",
			[]Op{drain(0, "drain", "ok", 1), dests(0, "n2", 1.1, false)}, ""},
		{"the client's own drain missing on another node that answered past its index",
			[]Op{with(drain(0, "drain", "ok", 1), func(o *Op) { o.Index = 7 }), with(dests(0, "n2", 1.1, false), func(o *Op) { o.Index = 7 })}, RuleReadYourWrites},
		{"a read answered below the index the client sent",
			[]Op{with(dests(0, "n2", 1, false), func(o *Op) { o.Index, o.MinIndex = 5, 9 })}, RuleMonotonicReads},
		{"a read answered without an index while the build answers reads with one",
			[]Op{read(0, "n2", 1, map[string]string{"k1": "active"})}, "indexed:" + RuleMonotonicReads},
		{"a read answered with an index: nothing",
			[]Op{with(read(0, "n2", 1, map[string]string{"k1": "active"}), func(o *Op) { o.Index = 3 })}, "indexed:"},
		{"a client's reads of one node go back (within the read bound: monotonic reads only)",
			[]Op{read(0, "n2", 1, map[string]string{"k1": "active", "k2": "installed"}), read(0, "n2", 2, map[string]string{"k1": "active"})}, RuleMonotonicReads},
		{"a client's reads of one node go back across a restart, within the read bound: nothing",
			[]Op{read(0, "n2", 1, map[string]string{"k1": "inactive", "k2": "active"}), with(read(0, "n2", 1.2, map[string]string{"k1": "inactive", "k2": "installed"}), func(o *Op) { o.Epoch = 2 })}, ""},
		{"a client's reads of one node go back across a restart, past the read bound: the model",
			[]Op{read(0, "n2", 1, map[string]string{"k1": "inactive", "k2": "active"}), with(read(0, "n2", 5, map[string]string{"k1": "inactive", "k2": "installed"}), func(o *Op) { o.Epoch = 2 })}, RuleNotLinearizable},
		{"a value under a revoked key opens after the bound",
			[]Op{revoke(0, "n1", "ok", 1, "k1"), openRevoked(7, "ok")}, RuleRevocation},
		{"a value under a revoked key opens within the bound, and is refused after: nothing",
			[]Op{revoke(0, "n1", "ok", 1, "k1"), openRevoked(2, "ok"), openRevoked(7, "fail")}, ""},
		{"a new session on a destination drained long before",
			[]Op{drain(0, "drain", "ok", 1), seal(7, "d1")}, RuleDrainDataPath},
		{"a new session on it within the bound, or with an undrain of unknown outcome since: nothing",
			[]Op{drain(0, "drain", "ok", 1), seal(3, "d1"), drain(1, "undrain", "info", 8), seal(20, "d1")}, ""},
		{"a new session refused while a destination was known undrained",
			[]Op{with(seal(7, ""), func(o *Op) { o.Type, o.Status = "info", 503 })}, RuleDrainDataPath},
		{"5xx and timeouts on nodes up and in the majority beyond the budget",
			[]Op{with(seal(1, "d1"), func(o *Op) { o.Type, o.Status = "info", 502 }), seal(2, "d2")}, RuleAvailability},
		{"on nodes cut off: nothing",
			[]Op{with(seal(1, "d1"), func(o *Op) { o.Type, o.Status, o.Clean = "info", 502, false }), seal(2, "d2")}, ""},
	}
	for i := range cases {
		c := &cases[i]
		h := History{Ops: c.ops}
		want := c.want
		if rest, ok := strings.CutPrefix(want, "indexed:"); ok {
			h.IndexedReads, want = true, rest
		}
		vs, undecided := CheckModel(&h, "")
		if len(undecided) > 0 {
			t.Errorf("%s: undecided %v", c.desc, undecided)
		}
		var got []string
		for _, v := range vs {
			if len(got) == 0 || got[len(got)-1] != v.Rule {
				got = append(got, v.Rule)
			}
		}
		if strings.Join(got, "|") != want {
			t.Errorf("%s: violations %q, want %q", c.desc, got, want)
			for _, v := range vs {
				t.Logf("  %s", v)
			}
		}
	}
}

// TestLivenessRules: the probe after the heal, acknowledged rotations that
// never activate, and committed key times off the schedule.
func TestLivenessRules(t *testing.T) {
	begin := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return begin.Add(time.Duration(s * float64(time.Second))) }
	final := func(state string, created time.Time) map[string]Final {
		return map[string]Final{"n1": {Keys: map[string]string{"k1": state}, Times: map[string]KeyTimes{"k1": {Created: created, Activates: created, Expires: created.Add(90 * 24 * time.Hour)}}}}
	}
	probe := func(typ string, took float64) Op {
		return Op{Client: -1, Kind: "probe-active", Node: "n1", Type: typ, Start: at(60), End: at(60 + took)}
	}
	rot := Op{Client: 0, Kind: "rotate", Node: "n1", Type: "ok", Result: "k1", Start: at(1), End: at(1.1)}
	cases := []struct {
		desc string
		h    History
		want string
	}{
		{"active within the bound: nothing", History{Ops: []Op{rot, probe("ok", 1)}, Final: final("active", at(1)), Begin: at(0), Healed: at(59)}, ""},
		{"active after 10 s", History{Ops: []Op{rot, probe("ok", 10)}, Final: final("active", at(1)), Begin: at(0), Healed: at(59)}, RuleLiveness},
		{"healed, no probe", History{Ops: []Op{rot}, Final: final("active", at(1)), Begin: at(0), Healed: at(59)}, RuleLiveness},
		{"an acknowledged rotation still installed", History{Ops: []Op{rot}, Final: final("installed", at(1)), Begin: at(0)}, RuleNeverActivated},
		{"a key created 2500 h ahead", History{Ops: []Op{rot}, Final: final("active", at(2500*3600)), Begin: at(0)}, RuleSchedule},
		{"a key expired within the run", History{Ops: []Op{rot}, Final: final("expired", at(1)), Begin: at(0)}, RuleSchedule},
	}
	for i := range cases {
		c := &cases[i]
		var got []string
		for _, v := range checkLiveness(&c.h) {
			if len(got) == 0 || got[len(got)-1] != v.Rule {
				got = append(got, v.Rule)
			}
		}
		if strings.Join(got, "|") != c.want {
			t.Errorf("%s: violations %q, want %q", c.desc, got, c.want)
		}
	}
}

// TestModelFindsConfigViolations: each rule of the config check on a small
// history that breaks it, and on one that comes close without breaking it.
func TestModelFindsConfigViolations(t *testing.T) {
	at := func(s float64) time.Time {
		return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(s * float64(time.Second)))
	}
	push := func(s float64, version, ifVersion uint64, summary string) Op {
		return Op{Client: 0, Kind: "push", Node: "n1", Type: "ok", Start: at(s), End: at(s + 0.1), Epoch: 1, Version: version, IfVersion: ifVersion, Result: summary}
	}
	sample := func(s float64, node string, epoch int, version uint64) Sample {
		return Sample{At: at(s), Node: node, Term: 2, State: "Follower", Leader: "n1", ConfigVersion: version, Epoch: epoch}
	}
	history := []ConfigEntry{{2, "s2"}, {1, "s1"}}
	final := func(versions ...uint64) map[string]Final {
		f := map[string]Final{}
		for i, v := range versions {
			f[fmt.Sprintf("n%d", i+1)] = Final{ConfigVersion: v, Configs: history}
		}
		return f
	}
	twoPushes := []Op{push(1, 1, 0, "s1"), push(3, 2, 1, "s2")}
	cases := []struct {
		desc   string
		ops    []Op
		status []Sample
		final  map[string]Final
		want   string
	}{
		{"every node walks 0, 1, 2: nothing", twoPushes,
			[]Sample{sample(0.5, "n2", 1, 0), sample(2, "n2", 1, 1), sample(4, "n2", 1, 2), sample(4, "n3", 1, 2)}, final(2, 2, 2), ""},
		{"a node skips version 1: nothing", twoPushes,
			[]Sample{sample(0.5, "n2", 1, 0), sample(4, "n2", 1, 2)}, final(2, 2), ""},
		{"a node goes back from 2 to 1 in one process", twoPushes,
			[]Sample{sample(2, "n2", 1, 1), sample(4, "n2", 1, 2), sample(5, "n2", 1, 1), sample(6, "n2", 1, 2)}, final(2, 2), RuleConfigBack},
		{"a restarted node starts lower, then catches up: nothing", twoPushes,
			[]Sample{sample(4, "n2", 1, 2), sample(5, "n2", 2, 1), sample(6, "n2", 2, 2)}, final(2, 2), ""},
		{"a node applies version 2 while one push was sent", twoPushes,
			[]Sample{sample(2, "n2", 1, 2)}, final(2, 2), RuleConfigAhead},
		{"a node applies version 1 as its push is sent, before the answer: nothing", twoPushes,
			[]Sample{sample(1.05, "n2", 1, 1)}, final(2, 2), ""},
		{"a node applies a version never committed", twoPushes,
			[]Sample{sample(4, "n2", 1, 3)}, final(2, 2), RuleConfigAhead},
		{"a node still on version 1 at the end", twoPushes, nil, final(2, 1), RuleConfigBehind},
		{"two pushes answered the same version", []Op{push(1, 1, 0, "s1"), push(3, 1, 0, "s1")}, nil, final(2, 2), RuleConfigLost},
		{"an acknowledged push's version holds another summary at the end", []Op{push(1, 1, 0, "s1"), push(3, 2, 0, "other")}, nil, final(2, 2), RuleConfigLost},
		{"a push with If-Match 1 committed as version 3", []Op{push(1, 1, 0, "s1"), push(3, 3, 1, "s3")}, nil, final(2, 2), RuleConfigIfMatch + "|" + RuleConfigLost},
		{"a push of unknown outcome and one refused by If-Match: nothing",
			[]Op{push(1, 1, 0, "s1"), {Kind: "push", Node: "n2", Type: "info", Start: at(2), End: at(9)}, {Kind: "push", Node: "n3", Type: "fail", Status: 412, IfVersion: 1, Start: at(3), End: at(3.1)}},
			[]Sample{sample(4, "n2", 1, 2)}, final(2, 2), ""},
	}
	for i := range cases {
		c := &cases[i]
		h := History{Ops: c.ops, Status: c.status, Final: c.final}
		var got []string
		for _, v := range checkConfig(&h) {
			if len(got) == 0 || got[len(got)-1] != v.Rule {
				got = append(got, v.Rule)
			}
		}
		if strings.Join(got, "|") != c.want {
			t.Errorf("%s: violations %q, want %q", c.desc, got, c.want)
			for _, v := range checkConfig(&h) {
				t.Logf("  %s", v)
			}
		}
	}
}
