package chaos

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
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
		// Recorded: TETHER_CHAOS_FAULTS=clock-leader, 60 s, seed 3, against
		// the build before committed times came from the cluster time. The
		// leader's clock jumps (2500 h, 100 h, 30 min ahead, 3 h back): the
		// keys it made then are created ahead, 72 acknowledged rotations
		// never activate, nor does the probe's after the heal.
		{"clock-ahead-before-cluster-time.json.gz", []string{RuleNeverActivated, RuleSchedule, RuleLiveness}},
		// Recorded: TETHER_CHAOS_EXTRA=reuse-ids TETHER_CHAOS_FAULTS=pause,
		// 25 s, seed 2, against a build whose request ids are not bound to
		// their request: a drain or undrain sent with the id of the
		// client's previous write answers 200 with that write's result, and
		// the client's read back through the same node misses it.
		{"reused-request-id-recorded.json.gz", []string{RuleReadYourWrites}},
		// The same fault, written out small: a request id reused for
		// a drain of another destination answers with the first drain's
		// result, and d2 is never drained.
		{"reused-request-id-answers-another-drain.json", []string{RuleLostWrite, RuleNotLinearizable, RuleReadYourWrites, RuleDrainDataPath}},
		// Recorded: TETHER_CHAOS_EXTRA=revoke-active TETHER_CHAOS_FAULTS=pause,
		// 25 s, seed 4, against a build whose revocation answers with the
		// revocation's index: the active key revoked through follower n4
		// names its replacement, which n4 does not list when the client
		// reads back there.
		{"revoke-active-recorded.json.gz", []string{RuleReadYourWrites}},
		// The same, written out small.
		{"revoke-answer-names-a-key-the-follower-lacks.json", []string{RuleReadYourWrites}},
		// A removed member holds up activation: the probe's rotation
		// takes 10.4 s to be active everywhere.
		{"removed-member-holds-up-rotation.json", []string{RuleLiveness}},
		// Recorded: make chaos-short (25 s, seed 1) against a build
		// without these faults.
		{"chaos-short-seed1.json.gz", nil},
	} {
		t.Run(strings.TrimSuffix(strings.TrimSuffix(c.file, ".gz"), ".json"), func(t *testing.T) {
			h, err := readHistory(filepath.Join("testdata", c.file))
			if err != nil {
				t.Fatal(err)
			}
			vs := Check(h)
			mv, undecided := CheckModel(h, "")
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

// readHistory reads a history.json, gzipped when its name ends in .gz.
func readHistory(path string) (*History, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		z, err := gzip.NewReader(f)
		if err != nil {
			return nil, err
		}
		r = z
	}
	var h History
	if err := json.NewDecoder(r).Decode(&h); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &h, nil
}
