package test

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// tetherBin is the binary built once by TestMain; raceBuild says whether
// it was built with the race detector.
var (
	tetherBin string
	raceBuild bool
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// Every test here builds tether with the race detector and runs it
		// as processes: minutes, not the seconds -short stands for.
		fmt.Println("test: end-to-end tests skipped under -short")
		os.Exit(0)
	}
	var flags []string
	if os.Getenv("TETHER_BENCH_CLUSTER") == "" {
		flags = []string{"-race"} // figures are measured without the race detector's cost
		raceBuild = true
	}
	bin, dir, err := testutil.BuildTether("..", flags...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tetherBin = bin
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

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
