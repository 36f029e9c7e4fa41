package testutil

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Proc is a process a test started (the built tether binary, say), with
// its output kept for the test to read. It is killed when the test ends,
// and its stderr is logged when the test failed.
type Proc struct {
	T      testing.TB
	Cmd    *exec.Cmd
	Stdout *SyncBuffer
	Stderr *SyncBuffer
	done   chan struct{}
	err    error
}

// Start runs bin with args, the environment plus env.
func Start(t testing.TB, bin string, env []string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	return StartCmd(t, cmd)
}

// StartCmd runs cmd (its Stdout and Stderr are set here).
func StartCmd(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{T: t, Cmd: cmd, Stdout: &SyncBuffer{}, Stderr: &SyncBuffer{}, done: make(chan struct{})}
	bin, args := cmd.Path, cmd.Args[1:]
	p.Cmd.Stdout, p.Cmd.Stderr = p.Stdout, p.Stderr
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s %v: %v", bin, args, err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.Cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s %v stderr:\n%s", bin, args, p.Stderr.String())
		}
	})
	return p
}

// Done is closed once the process has exited; Err then says how.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the process's exit error, once Done is closed.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) {
	p.T.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		p.T.Fatalf("signal %v: %v", sig, err)
	}
}

// Wait waits for the process to exit and returns its exit code.
func (p *Proc) Wait(timeout time.Duration) int {
	p.T.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.T.Fatalf("%s did not exit within %v", p.Cmd.Path, timeout)
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	p.T.Fatalf("wait: %v", p.err)
	return -1
}

// LogLine finds the first JSON log line on stderr whose msg is msg.
func (p *Proc) LogLine(msg string) map[string]any {
	sc := bufio.NewScanner(strings.NewReader(p.Stderr.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			return m
		}
	}
	return nil
}

// WaitLogLine waits up to timeout for the JSON log line whose msg is msg
// (a node's "node started", say) and returns it; the test fails if the
// process exits first.
func (p *Proc) WaitLogLine(msg string, timeout time.Duration) map[string]any {
	p.T.Helper()
	var line map[string]any
	Eventually(p.T, timeout, fmt.Sprintf("%s to log %q", p.Cmd.Path, msg), func() bool {
		select {
		case <-p.done:
			p.T.Fatalf("%s exited before logging %q: %v\n%s", p.Cmd.Path, msg, p.err, p.Stderr.String())
		default:
		}
		line = p.LogLine(msg)
		return line != nil
	})
	return line
}

// Get sends a GET with optional headers and returns status, headers, body.
func Get(t testing.TB, c *http.Client, url string, hdr map[string]string) (int, http.Header, string) {
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

// BuildTether builds cmd/tether of the repository at root into a new
// temporary directory, with flags (e.g. "-race") before -o, for a test
// package's TestMain; remove the directory when done.
func BuildTether(root string, flags ...string) (bin, dir string, err error) {
	dir, err = os.MkdirTemp("", "tether-bin-")
	if err != nil {
		return "", "", err
	}
	bin = filepath.Join(dir, "tether")
	build := exec.Command("go", append(append([]string{"build"}, flags...), "-o", bin, "./cmd/tether")...)
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("building tether: %w", err)
	}
	return bin, dir, nil
}
