//go:build chaosclock

package node

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// The fault test's build (-tags chaosclock) moves a node's wall clock as an
// NTP step does, and only that: waits measured in elapsed time do not jump
// with it. A key held up by a failed member is passed over once
// activationWait has really passed, not as soon as the wall clock jumps.
func TestChaosClockStepMovesOnlyTheWallClock(t *testing.T) {
	file := filepath.Join(t.TempDir(), "clock")
	if err := os.WriteFile(file, []byte("0"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TETHER_CHAOS_CLOCK_FILE", file)
	tc := newTestCluster(t, 1)
	logs := &lockedBuffer{}
	var join []string
	for _, id := range []string{"n1", "n2", "n3"} {
		cfg := tc.config(id, 3, join)
		cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		join = append(join, tc.start(cfg).GossipAddr())
	}
	tc.waitSettled()
	l := tc.waitLeader()
	ghost := tc.ghost("ghost", 0, l.GossipAddr())
	testutil.Eventually(t, 10*time.Second, "the ghost alive on the leader", func() bool { return memberState(l, "ghost") == "alive" })
	ghost.Shutdown()
	testutil.Eventually(t, 20*time.Second, "the ghost dead on the leader", func() bool { return memberState(l, "ghost") == "dead" })

	status, body := adminWrite(t, l, "POST", "/v1/keyring/rotate", nil)
	if status != 200 {
		t.Fatalf("rotate: %d %v", status, body)
	}
	id := body["id"].(string)
	rotated := time.Now()
	if err := os.WriteFile(file, []byte("1h"), 0o600); err != nil {
		t.Fatal(err)
	}
	var waited time.Duration
	testutil.Eventually(t, 30*time.Second, "the key activated passing the failed ghost over", func() bool {
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) != nil || line["id"] != id || !strings.HasPrefix(fmt.Sprint(line["msg"]), "activating a key that failed members do not hold") {
				continue
			}
			d, err := time.ParseDuration(fmt.Sprint(line["waited"]))
			if err != nil {
				t.Fatalf("waited %v: %v", line["waited"], err)
			}
			waited = d
			return true
		}
		return false
	})
	took := time.Since(rotated)
	if waited > time.Minute || took < activationWait-time.Second {
		t.Fatalf("the failed ghost was passed over after %s of real time, the leader counting %s waited: want activationWait (%s) of real time",
			took.Round(time.Millisecond), waited, activationWait)
	}
}
