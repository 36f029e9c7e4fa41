package chaos

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCheckRecordedHistory: histories in testdata, each showing one fault
// of the cluster as clients saw it, are rejected with the rules that fault
// breaks; a history of a run of the fault test against a correct build is
// accepted. The checker runs as in TestChaos, without a cluster.
func TestCheckRecordedHistory(t *testing.T) {
	for _, c := range []struct {
		file string
		want []string // rules that must be reported (none: no violation at all)
	}{
		// The leader's clock 2500 h ahead for 10 s: the key it made then
		// is created 2500 h ahead and 45 acknowledged rotations after the
		// heal stay installed; so does the probe's.
		{"clock-ahead-rotations-never-activate.json", []string{RuleNeverActivated, RuleSchedule, RuleLiveness}},
		// A request id reused for a drain of another destination answered
		// with the first drain's result: d2 was never drained.
		{"reused-request-id-answers-another-drain.json", []string{RuleLostWrite, RuleNotLinearizable, RuleReadYourWrites, RuleDrainDataPath}},
		// A revocation answered through a follower names a replacement key
		// the follower does not hold when the client reads back there.
		{"revoke-answer-names-a-key-the-follower-lacks.json", []string{RuleReadYourWrites}},
		// A removed member holds up activation: the probe's rotation
		// takes 10.4 s to be active everywhere.
		{"removed-member-holds-up-rotation.json", []string{RuleLiveness}},
		// make chaos-short against a correct build.
		{"chaos-short-seed1.json", nil},
	} {
		t.Run(strings.TrimSuffix(c.file, ".json"), func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", c.file))
			if err != nil {
				t.Fatal(err)
			}
			var h History
			if err := json.Unmarshal(b, &h); err != nil {
				t.Fatal(err)
			}
			vs := Check(&h)
			mv, undecided := CheckModel(&h, "")
			vs = append(vs, mv...)
			if len(undecided) > 0 {
				t.Errorf("porcupine did not decide %v", undecided)
			}
			got := map[string]bool{}
			for _, v := range vs {
				got[v.Rule] = true
			}
			for _, r := range c.want {
				if !got[r] {
					t.Errorf("not reported: %q", r)
				}
			}
			if c.want == nil && len(vs) > 0 {
				t.Errorf("%d violations in a correct run, e.g. %s", len(vs), vs[0])
			}
			if t.Failed() || testing.Verbose() {
				shown := map[string]int{}
				for _, v := range vs {
					if shown[v.Rule]++; shown[v.Rule] <= 2 && (slices.Contains(c.want, v.Rule) || c.want == nil) {
						t.Logf("reported: %s", v)
					}
				}
			}
		})
	}
}
