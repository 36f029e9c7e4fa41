package uitest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// tetherBin is the binary TestMain builds once, with -race, from the
// product module (the repository root), as `make build` would.
var tetherBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tether-uitest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tetherBin = filepath.Join(dir, "tether")
	build := exec.Command("go", "build", "-race", "-o", tetherBin, "./cmd/tether")
	build.Dir = "../.."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building tether:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// catchAll routes every path to the cluster "app".
const catchAll = `"all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } }`

// proc is a running tether process.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *testutil.SyncBuffer
	done   chan struct{}
	err    error
}

func start(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, stderr: &testutil.SyncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(tetherBin, args...)
	p.cmd.Stdout, p.cmd.Stderr = io.Discard, p.stderr
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

// clusterAgent is one `tether agent` of a multi-process cluster.
type clusterAgent struct {
	*proc
	id       string
	proxyURL string
	adminURL string
	gossip   string
	extra    []string
	dataDir  string
}

// clusterEnv is what every agent of a test cluster shares.
type clusterEnv struct {
	t      *testing.T
	config string
	secret string
	ports  map[string][2]string
	mu     sync.Mutex
}

func newClusterEnv(t *testing.T, config string) *clusterEnv {
	dir := t.TempDir()
	e := &clusterEnv{t: t, config: filepath.Join(dir, "tether.json"), secret: filepath.Join(dir, "secret"), ports: map[string][2]string{}}
	testutil.WriteFile(t, e.config, config)
	testutil.WriteFile(t, e.secret, "a-ui-test-cluster-secret-0123456789abcdef")
	return e
}

// startNode runs `tether agent` as node id with the cluster's flags plus
// extra, in dataDir ("" for a new one).
func (e *clusterEnv) startNode(id, dataDir string, extra ...string) *clusterAgent {
	e.t.Helper()
	if dataDir == "" {
		dataDir = e.t.TempDir()
	}
	// Each node keeps its Raft and gossip ports across restarts, as a
	// deployment does.
	e.mu.Lock()
	ports, ok := e.ports[id]
	if !ok {
		ports = [2]string{testutil.FreeAddr(e.t), testutil.FreeAddr(e.t)}
		e.ports[id] = ports
	}
	e.mu.Unlock()
	args := append([]string{"agent", "--config", e.config, "--node-id", id, "--data-dir", dataDir,
		"--admin-addr", "127.0.0.1:0", "--raft-addr", ports[0], "--gossip-addr", ports[1],
		"--cluster-secret-file", e.secret, "--no-access-log"}, extra...)
	p := start(e.t, args...)
	var started map[string]any
	testutil.Eventually(e.t, 60*time.Second, id+" started", func() bool {
		select {
		case <-p.done:
			e.t.Fatalf("%s exited early: %v\n%s", id, p.err, p.stderr.String())
		default:
		}
		started = p.logLine("node started")
		return started != nil
	})
	a := &clusterAgent{proc: p, id: id, extra: extra, dataDir: dataDir}
	a.proxyURL = "http://" + strings.Split(started["proxy"].(string), ",")[0]
	a.adminURL = "http://" + started["admin"].(string)
	a.gossip, _ = started["gossip"].(string)
	return a
}

// probedBackend answers with its name and can fail its health probes.
type probedBackend struct {
	name string
	srv  *httptest.Server
	sick atomic.Bool
}

func newProbedBackend(t *testing.T, name string) *probedBackend {
	b := &probedBackend{name: name}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			if b.sick.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		}
		w.Header().Set("X-Demo-Backend", name)
		fmt.Fprint(w, name)
	}))
	t.Cleanup(b.srv.Close)
	return b
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
