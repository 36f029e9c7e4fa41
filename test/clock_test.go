package test

import (
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// chaosclockBin is tether built with -tags chaosclock (each agent's wall
// clock moves by the offset its TETHER_CHAOS_CLOCK_FILE holds), built once.
var chaosclockBin = sync.OnceValues(func() (string, error) {
	bin, _, err := testutil.BuildTether("..", "-race", "-tags", "chaosclock")
	return bin, err
})

// keyringOf is an agent's GET /v1/keyring: the active key and each key's
// row by id.
func keyringOf(t *testing.T, a *clusterAgent) (string, map[string]map[string]any) {
	t.Helper()
	st, body := adminJSON(t, "GET", a.adminURL+"/v1/keyring")
	if st != 200 {
		return "", nil
	}
	keys := map[string]map[string]any{}
	rows, _ := body["keys"].([]any)
	for _, r := range rows {
		k := r.(map[string]any)
		keys[k["id"].(string)] = k
	}
	active, _ := body["active_key_id"].(string)
	return active, keys
}

func rowTime(t *testing.T, k map[string]any, field string) time.Time {
	t.Helper()
	s, _ := k[field].(string)
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("key %v: %s %q: %v", k["id"], field, s, err)
	}
	return tm
}

// TestClusterLeaderClockJumpsAheadAndBackRotationStillActivates drives the
// fault test's build: the leader's wall clock jumps 2500 h ahead while a
// rotation is made and activated, then comes back. A rotation made after
// that is active on every node within seconds, no key was created in the
// future, a drain made while the clock was ahead ends DrainTimeout after
// it was asked for, and every node ends with the same keyring.
func TestClusterLeaderClockJumpsAheadAndBackRotationStillActivates(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tether with -tags chaosclock")
	}
	bin, err := chaosclockBin()
	if err != nil {
		t.Fatal(err)
	}
	clocks := t.TempDir()
	clockFile := func(id string) string { return filepath.Join(clocks, id+".clock") }
	e := newClusterEnv(t, cookieConfig(testutil.NewBackend(t, "b1"), testutil.NewBackend(t, "b2")))
	e.Bin = bin
	e.Env = func(id string) []string { return []string{"TETHER_CHAOS_CLOCK_FILE=" + clockFile(id)} }
	nodes := e.form(3)
	var leader, follower *clusterAgent
	testutil.Eventually(t, 20*time.Second, "a leader", func() bool {
		id := leaderOf(t, nodes[0])
		for _, a := range nodes {
			if a.id == id {
				leader = a
			} else {
				follower = a
			}
		}
		return leader != nil && id != ""
	})

	testutil.WriteFile(t, clockFile(leader.id), "2500h")
	var during string
	testutil.Eventually(t, 15*time.Second, "a rotation while the leader's clock is ahead", func() bool {
		st, body := adminJSON(t, "POST", leader.adminURL+"/v1/keyring/rotate")
		during, _ = body["id"].(string)
		return st == 200
	})
	asked := time.Now()
	st, drain := adminJSON(t, "POST", follower.adminURL+"/v1/clusters/app/destinations/b1/drain")
	if st != 200 {
		t.Fatalf("drain: %d %v", st, drain)
	}
	testutil.Eventually(t, 20*time.Second, "the leader to activate the key rotated while its clock was ahead", func() bool {
		_, keys := keyringOf(t, leader)
		k, ok := keys[during]
		return ok && rowTime(t, k, "activates").Before(rowTime(t, k, "created").Add(24*time.Hour))
	})
	testutil.WriteFile(t, clockFile(leader.id), "0")

	var after string
	testutil.Eventually(t, 15*time.Second, "a rotation after the clock came back", func() bool {
		st, body := adminJSON(t, "POST", follower.adminURL+"/v1/keyring/rotate")
		after, _ = body["id"].(string)
		return st == 200
	})
	start := time.Now()
	testutil.Eventually(t, 15*time.Second, "the rotation active on every node", func() bool {
		for _, a := range nodes {
			if active, _ := keyringOf(t, a); active != after {
				return false
			}
		}
		return true
	})
	t.Logf("the rotation after the jump was active on every node %s after it was answered", time.Since(start).Round(time.Millisecond))

	now := time.Now()
	_, keys := keyringOf(t, leader)
	for id, k := range keys {
		if c := rowTime(t, k, "created"); c.After(now.Add(time.Minute)) {
			t.Errorf("key %s created %s, %s ahead", id, c.Format(time.RFC3339), c.Sub(now).Round(time.Second))
		}
	}
	want := asked.Add(5 * time.Minute) // the default DrainTimeout
	if d, _ := drain["drain_deadline"].(string); d == "" || func() bool {
		got, err := time.Parse(time.RFC3339Nano, d)
		return err != nil || got.Sub(want) > 30*time.Second || want.Sub(got) > 30*time.Second
	}() {
		t.Errorf("drain deadline %v, want about %s", drain["drain_deadline"], want.Format(time.RFC3339))
	}
	testutil.Eventually(t, 15*time.Second, "the same keyring on every node", func() bool {
		_, first := keyringOf(t, nodes[0])
		for _, a := range nodes[1:] {
			if _, k := keyringOf(t, a); !reflect.DeepEqual(k, first) {
				return false
			}
		}
		return len(first) > 0
	})
}
