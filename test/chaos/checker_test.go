package chaos

import (
	"encoding/base64"
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
