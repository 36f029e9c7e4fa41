package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// tetherBin is the binary built once by TestMain.
var tetherBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tether-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tetherBin = filepath.Join(dir, "tether")
	args := []string{"build", "-race", "-o", tetherBin, "../cmd/tether"}
	if os.Getenv("TETHER_BENCH_CLUSTER") != "" {
		args = slices.Delete(args, 1, 2) // figures are measured without the race detector's cost
	}
	build := exec.Command("go", args...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building tether:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuf is an io.Writer safe for the process's output goroutine and the
// test reading it.
type syncBuf = testutil.SyncBuffer

// proc is a running tether process.
type proc = testutil.Proc

func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return testutil.Start(t, tetherBin, env, args...)
}

// agent is a started `tether agent` with its bound addresses.
type agent struct {
	*proc
	proxyURL string
	adminURL string
}

func startAgent(t *testing.T, configPath string, env []string, extra ...string) *agent {
	t.Helper()
	args := append([]string{"agent", "--config", configPath, "--node-id", "e2e", "--data-dir", t.TempDir(), "--admin-addr", "127.0.0.1:0"}, extra...)
	p := start(t, env, args...)
	started := p.WaitLogLine("node started", 60*time.Second)
	a := &agent{proc: p}
	a.proxyURL = "http://" + strings.Split(started["proxy"].(string), ",")[0]
	a.adminURL = "http://" + started["admin"].(string)
	return a
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	testutil.WriteFile(t, path, content)
}
