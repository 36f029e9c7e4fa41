package uitest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// tetherBin is the binary TestMain builds once, with -race, from the
// product module (the repository root), as `make build` would.
var tetherBin string

func TestMain(m *testing.M) {
	bin, dir, err := testutil.BuildTether("../..", "-race")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tetherBin = bin
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// catchAll routes every path to the cluster "app".
const catchAll = `"all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } }`

// proc is a running tether process.
type proc = testutil.Proc

func start(t *testing.T, args ...string) *proc {
	t.Helper()
	return testutil.Start(t, tetherBin, nil, args...)
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
	started := p.WaitLogLine("node started", 60*time.Second)
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
