package test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// TestJoinAtARaftPortSaysItIsTheRaftPort: a Raft port takes memberlist's
// connection and drops it ("connection reset by peer", or EOF); tether
// join and --join say it may be the Raft port and that join takes the
// gossip address.
func TestJoinAtARaftPortSaysItIsTheRaftPort(t *testing.T) {
	dir := t.TempDir()
	cfg, secret := filepath.Join(dir, "tether.json"), filepath.Join(dir, "secret")
	testutil.WriteFile(t, cfg, configFor(catchAll, testutil.NewBackend(t, "b1")))
	testutil.WriteFile(t, secret, "an-e2e-cluster-secret-0123456789abcdef")
	os.Chmod(secret, 0o600)
	raft := testutil.FreeAddr(t)
	a := startAgent(t, cfg, nil, "--cluster-secret-file", secret, "--raft-addr", raft, "--gossip-addr", testutil.FreeAddr(t), "--no-access-log")
	defer func() { a.Signal(syscall.SIGTERM); a.Wait(30 * time.Second) }()

	code, out := run(t, nil, "join", raft, "--admin", a.adminURL)
	for _, w := range []string{raft, "Raft port", "gossip address", "7946"} {
		if code == 0 || !strings.Contains(out, w) {
			t.Errorf("tether join: exit %d, output lacks %q:\n%s", code, w, out)
		}
	}

	j := start(t, nil, "agent", "--config", cfg, "--node-id", "joiner", "--data-dir", t.TempDir(), "--admin-addr", "127.0.0.1:0",
		"--raft-addr", testutil.FreeAddr(t), "--gossip-addr", testutil.FreeAddr(t), "--cluster-secret-file", secret, "--no-access-log", "--join", raft)
	testutil.Eventually(t, 30*time.Second, "the joiner's log names the Raft port", func() bool {
		s := j.Stderr.String()
		return strings.Contains(s, raft) && strings.Contains(s, "Raft port") && strings.Contains(s, "gossip address")
	})
	j.Signal(syscall.SIGTERM)
	j.Wait(30 * time.Second)
}
