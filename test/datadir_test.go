package test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// TestASecondAgentOnALiveDataDirSaysItIsInUse: a second agent on a running
// node's data dir stops at once, saying the dir is in use and by which
// process, and exits non-zero; the running node keeps serving. A node
// killed without a chance to clean up does not block the next start.
func TestASecondAgentOnALiveDataDirSaysItIsInUse(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "tether.json")
	testutil.WriteFile(t, cfg, configFor(catchAll, testutil.NewBackend(t, "b1")))
	dir := t.TempDir()
	agentOn := func() *proc {
		return start(t, nil, "agent", "--config", cfg, "--node-id", "e2e", "--data-dir", dir, "--admin-addr", "127.0.0.1:0", "--no-access-log")
	}
	first := agentOn()
	started := first.WaitLogLine("node started", 60*time.Second)
	proxyURL := "http://" + strings.Split(started["proxy"].(string), ",")[0]

	second := agentOn()
	code := second.Wait(30 * time.Second)
	out := second.Stderr.String()
	want := fmt.Sprintf("data dir %s is in use by another tether process (pid %d)", dir, first.Cmd.Process.Pid)
	if code == 0 || !strings.Contains(out, want) {
		t.Fatalf("second agent on the same data dir: exit %d, want non-zero and %q in:\n%s", code, want, out)
	}
	if strings.Contains(out, "gossip started") || strings.Contains(out, "raft store open") {
		t.Errorf("the second agent opened gossip or Raft before finding the dir in use:\n%s", out)
	}
	if st, _, _ := testutil.Get(t, http.DefaultClient, proxyURL+"/", nil); st != 200 {
		t.Fatalf("the first node stopped serving after the second tried its dir: %d", st)
	}

	first.Cmd.Process.Signal(syscall.SIGKILL)
	first.Wait(30 * time.Second)
	third := agentOn()
	third.WaitLogLine("node started", 60*time.Second)
	third.Signal(syscall.SIGTERM)
	if code := third.Wait(30 * time.Second); code != 0 {
		t.Fatalf("restart after a kill: exit %d\n%s", code, third.Stderr.String())
	}
}
