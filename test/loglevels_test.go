package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// linesWith are p's JSON log lines whose msg is msg and whose attributes
// include every key=value of want.
func linesWith(t *testing.T, p *proc, msg string, want map[string]any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range logRecords(t, msg, p) {
		if m["msg"] != msg {
			continue
		}
		ok := true
		for k, v := range want {
			if fmt.Sprint(m[k]) != fmt.Sprint(v) {
				ok = false
			}
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

// TestJoinRefusedForAnotherSecretIsAWarningThenAnError: a node whose
// cluster secret differs from its peers' cannot join; that is an
// operator's mistake, not routine: a warning at once, an error once it
// lasts. The node it knocks at is fine: a warning there, no error.
func TestJoinRefusedForAnotherSecretIsAWarningThenAnError(t *testing.T) {
	dir := t.TempDir()
	cfg, secret, other := filepath.Join(dir, "tether.json"), filepath.Join(dir, "secret"), filepath.Join(dir, "other-secret")
	testutil.WriteFile(t, cfg, configFor(catchAll, testutil.NewBackend(t, "b1")))
	testutil.WriteFile(t, secret, "an-e2e-cluster-secret-0123456789abcdef")
	testutil.WriteFile(t, other, "another-cluster-secret-0123456789abcdef")
	os.Chmod(secret, 0o600)
	os.Chmod(other, 0o600)
	a := start(t, nil, "agent", "--config", cfg, "--node-id", "a", "--data-dir", t.TempDir(), "--admin-addr", "127.0.0.1:0",
		"--raft-addr", testutil.FreeAddr(t), "--gossip-addr", testutil.FreeAddr(t), "--cluster-secret-file", secret, "--no-access-log")
	gossip := a.WaitLogLine("node started", 60*time.Second)["gossip"].(string)

	b := start(t, nil, "agent", "--config", cfg, "--node-id", "b", "--data-dir", t.TempDir(), "--admin-addr", "127.0.0.1:0",
		"--raft-addr", testutil.FreeAddr(t), "--gossip-addr", testutil.FreeAddr(t), "--cluster-secret-file", other, "--no-access-log", "--join", gossip)
	const msg = "gossip: join failed, retrying"
	testutil.Eventually(t, 30*time.Second, "the refused joins to be logged as an error", func() bool {
		return len(linesWith(t, b, msg, map[string]any{"level": "ERROR"})) > 0
	})
	lines := linesWith(t, b, msg, nil)
	if lines[0]["level"] != "WARN" || !strings.Contains(fmt.Sprint(lines[0]["err"]), "another cluster secret") {
		t.Errorf("first refused join: %v, want a WARN naming the other secret", lines[0])
	}
	for _, m := range logRecords(t, "a", a) {
		if m["level"] == "ERROR" {
			t.Errorf("the node a stranger knocks at logs an error: %v", m)
		}
	}
}

// TestDestinationHealthLogsAtItsLevel: a destination turning unhealthy is
// a warning; healthy again is news (info).
func TestDestinationHealthLogsAtItsLevel(t *testing.T) {
	b1, b2 := testutil.NewBackend(t, "b1"), testutil.NewBackend(t, "b2")
	cfg := filepath.Join(t.TempDir(), "tether.json")
	testutil.WriteFile(t, cfg, healthConfig(1, b1, b2))
	a := startAgent(t, cfg, nil, "--no-access-log")
	const msg = "destination health changed"
	testutil.Eventually(t, 30*time.Second, "b1 healthy", func() bool {
		return len(linesWith(t, a.proc, msg, map[string]any{"destination": "b1", "health": "healthy"})) > 0
	})
	b1.Sick.Store(true)
	testutil.Eventually(t, 30*time.Second, "b1 unhealthy", func() bool {
		return len(linesWith(t, a.proc, msg, map[string]any{"destination": "b1", "health": "unhealthy"})) > 0
	})
	b1.Sick.Store(false)
	testutil.Eventually(t, 30*time.Second, "b1 healthy again", func() bool {
		return len(linesWith(t, a.proc, msg, map[string]any{"destination": "b1", "health": "healthy"})) > 1
	})
	for _, m := range linesWith(t, a.proc, msg, map[string]any{"destination": "b1"}) {
		want := map[string]string{"healthy": "INFO", "unhealthy": "WARN"}[fmt.Sprint(m["health"])]
		if m["level"] != want {
			t.Errorf("b1 turning %v logged at %v, want %s: %v", m["health"], m["level"], want, m)
		}
	}
}

// TestRestoreAndQuorumLossLogNoLibraryAlarms: a successful restore logs no
// error (raft looking for entries the restore compacted away is routine:
// it sends the snapshot), formation no warning about rejected entries, and
// a node that lost its quorum says so once instead of once per election
// round.
func TestRestoreAndQuorumLossLogNoLibraryAlarms(t *testing.T) {
	e := newClusterEnv(t, cookieConfig(testutil.NewBackend(t, "b1")))
	nodes := e.form(3)
	file := filepath.Join(t.TempDir(), "cluster.snapshot")
	if code, out := run(t, nil, "snapshot", "save", file, "--admin", nodes[0].adminURL); code != 0 {
		t.Fatalf("snapshot save: %d %s", code, out)
	}
	if code, out := run(t, nil, "snapshot", "restore", file, "--yes", "--admin", nodes[0].adminURL); code != 0 {
		t.Fatalf("snapshot restore: %d %s", code, out)
	}
	testutil.Eventually(t, 30*time.Second, "every node to install the restored state", func() bool {
		for _, a := range nodes {
			if !strings.Contains(a.Stderr.String(), "Installed remote snapshot") && !strings.Contains(a.Stderr.String(), "replicated state restored from a backup") {
				return false
			}
		}
		return true
	})
	for _, a := range nodes {
		for _, m := range logRecords(t, a.id, a.proc) {
			if m["level"] == "ERROR" || (m["level"] == "WARN" && strings.HasPrefix(fmt.Sprint(m["msg"]), "appendEntries rejected")) {
				t.Errorf("%s: formation or a successful restore logged %v: %v", a.id, m["level"], m)
			}
		}
	}

	for _, a := range nodes[1:] {
		a.Cmd.Process.Signal(syscall.SIGKILL)
		a.Wait(30 * time.Second)
	}
	// Raft restarts an election about every second without a quorum:
	// give it several rounds.
	<-time.After(8 * time.Second)
	survivor := nodes[0]
	rounds := len(linesWith(t, survivor.proc, "Election timeout reached, restarting election", nil))
	candidates := len(linesWith(t, survivor.proc, "entering candidate state", nil))
	if rounds > 1 || candidates > 2 {
		t.Errorf("quorum lost for 8 s: %d 'Election timeout reached' and %d 'entering candidate state' lines, want one episode (at most 1 and 2)", rounds, candidates)
	}
	if rounds == 0 && candidates == 0 {
		t.Errorf("no election logged at all after the quorum was lost: the check proved nothing")
	}
}
