package test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
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
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdout *syncBuf
	stderr *syncBuf
	done   chan struct{}
	err    error
}

func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, stdout: &syncBuf{}, stderr: &syncBuf{}, done: make(chan struct{})}
	p.cmd = exec.Command(tetherBin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start tether %v: %v", args, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("tether %v stderr:\n%s", args, p.stderr.String())
		}
	})
	return p
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("tether did not exit within %v", timeout)
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	p.t.Fatalf("wait: %v", p.err)
	return -1
}

// logLine finds the first JSON log line on stderr whose msg is msg.
func (p *proc) logLine(msg string) map[string]any {
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			return m
		}
	}
	return nil
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
	var started map[string]any
	testutil.Eventually(t, 60*time.Second, "node started", func() bool {
		select {
		case <-p.done:
			t.Fatalf("tether exited early: %v\n%s", p.err, p.stderr.String())
		default:
		}
		started = p.logLine("node started")
		return started != nil
	})
	a := &agent{proc: p}
	a.proxyURL = "http://" + strings.Split(started["proxy"].(string), ",")[0]
	a.adminURL = "http://" + started["admin"].(string)
	return a
}

// get sends a GET with optional headers and returns status, headers, body.
func get(t *testing.T, c *http.Client, url string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	testutil.WriteFile(t, path, content)
}
