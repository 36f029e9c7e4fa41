package test

import (
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// refused says whether a TCP connection to addr is refused.
func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// TestANodeThatNeverJoinedServesNothing: a node started to join with no
// state of its own refuses proxy connections until it is in the cluster
// and holds the active key (with another cluster secret, never), and says
// so in /readyz and its log; once in, it serves the cluster's sessions.
// Restarted with its state it serves at once, with no leader reachable.
// --serve-before-join (or TETHER_SERVE_BEFORE_JOIN) serves at start.
func TestANodeThatNeverJoinedServesNothing(t *testing.T) {
	b1, b2 := testutil.NewBackend(t, "b1"), testutil.NewBackend(t, "b2")
	e := newClusterEnv(t, cookieConfig(b1, b2))
	a := e.startNode("a", "")
	testutil.Eventually(t, 60*time.Second, "a ready", func() bool { return ready(t, a) })
	_, hdr, _ := testutil.Get(t, http.DefaultClient, a.proxyURL+"/", nil)
	cookie, backend := strings.Split(hdr.Get("Set-Cookie"), ";")[0], hdr.Get("X-Demo-Backend")
	if cookie == "" {
		t.Fatal("no affinity cookie from a")
	}

	other := filepath.Join(t.TempDir(), "other-secret")
	testutil.WriteFile(t, other, "another-cluster-secret-0123456789abcdef")
	os.Chmod(other, 0o600)
	wrongArgs := func(extra ...string) []string {
		return append([]string{"agent", "--config", e.Config, "--node-id", "w", "--data-dir", t.TempDir(), "--admin-addr", "127.0.0.1:0",
			"--raft-addr", testutil.FreeAddr(t), "--gossip-addr", testutil.FreeAddr(t), "--cluster-secret-file", other, "--no-access-log", "--join", a.gossip}, extra...)
	}
	w := start(t, nil, wrongArgs()...)
	started := w.WaitLogLine("node started", 60*time.Second)
	wProxy, wAdmin := strings.Split(started["proxy"].(string), ",")[0], "http://"+started["admin"].(string)
	// The joins fail for as long as it runs: it must never serve.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		if !refused(wProxy) {
			t.Fatalf("a node that never joined (another cluster secret) accepted a proxy connection at %s", wProxy)
		}
		st, _, body := testutil.Get(t, http.DefaultClient, wAdmin+"/readyz", nil)
		if st != 503 || !strings.Contains(body, "proxy listeners closed until this node is in the cluster and holds the active key: not in the cluster yet") {
			t.Fatalf("/readyz of a node that never joined: %d %s", st, body)
		}
		<-time.After(100 * time.Millisecond) // a sample every 100 ms, bounded by the deadline
	}
	closed := w.WaitLogLine("proxy listeners closed until this node is in the cluster and holds the active key (--serve-before-join serves earlier)", 10*time.Second)
	if !strings.Contains(closed["waiting_for"].(string), "not in the cluster yet") {
		t.Errorf("the log says it waits for %q", closed["waiting_for"])
	}

	// The right secret: closed until in, then the cluster's sessions.
	j := e.startNode("j", "", "--join", a.gossip)
	testutil.Eventually(t, 60*time.Second, "j to open its listeners", func() bool {
		return j.LogLine("proxy listeners open: this node is in the cluster and holds the active key") != nil
	})
	if !ready(t, j) {
		t.Fatal("j opened its listeners but is not ready")
	}
	st, h, _ := testutil.Get(t, http.DefaultClient, j.proxyURL+"/", map[string]string{"Cookie": cookie})
	if st != 200 || h.Get("X-Demo-Backend") != backend || h.Get("Set-Cookie") != "" {
		t.Fatalf("j on a's session: %d backend %s (want %s) new cookie %q", st, h.Get("X-Demo-Backend"), backend, h.Get("Set-Cookie"))
	}
	if strings.Contains(j.Stderr.String(), `"proxy_open":true`) {
		t.Error("j said its listeners were open at start")
	}

	// Restarted with its state and no leader reachable: it serves at once.
	for _, x := range []*clusterAgent{a, j} {
		x.Signal(syscall.SIGTERM)
		x.Wait(30 * time.Second)
	}
	j2 := e.startNode("j", j.dataDir, "--join", a.gossip)
	if refused(strings.TrimPrefix(j2.proxyURL, "http://")) {
		t.Fatal("a node restarted with its state refused connections")
	}
	if st, h, _ := testutil.Get(t, http.DefaultClient, j2.proxyURL+"/", map[string]string{"Cookie": cookie}); st != 200 || h.Get("X-Demo-Backend") != backend {
		t.Fatalf("j restarted alone on a's session: %d %s", st, h.Get("X-Demo-Backend"))
	}

	for _, tc := range []struct {
		desc  string
		env   []string
		extra []string
	}{
		{"flag", nil, []string{"--serve-before-join"}},
		{"environment", []string{"TETHER_SERVE_BEFORE_JOIN=true"}, nil},
	} {
		t.Run("serve before join by "+tc.desc, func(t *testing.T) {
			p := start(t, tc.env, wrongArgs(tc.extra...)...)
			started := p.WaitLogLine("node started", 60*time.Second)
			if addr := strings.Split(started["proxy"].(string), ",")[0]; refused(addr) || started["proxy_open"] != true {
				t.Fatalf("--serve-before-join: proxy at %s refused (node started: %v)", addr, started)
			}
		})
	}
}
