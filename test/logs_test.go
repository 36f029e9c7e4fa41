package test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// logRecords parses every stderr line of p as JSON, failing on a line
// that is not JSON or repeats a key.
func logRecords(t *testing.T, who string, p *proc) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(p.Stderr.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		dups, err := testutil.DuplicateKeys(line)
		if err != nil || len(dups) > 0 {
			t.Errorf("%s: line repeats keys %v (%v): %s", who, dups, err, line)
			continue
		}
		var m map[string]any
		json.Unmarshal(line, &m)
		out = append(out, m)
	}
	return out
}

// TestClusterLogsStayQuietAndParseable: a follower's clean stop, a down
// peer and a restart are routine: no ERROR line, each key once on every
// line, and the down peer's raft errors at most once per 30 s per node.
func TestClusterLogsStayQuietAndParseable(t *testing.T) {
	e := newClusterEnv(t, cookieConfig(testutil.NewBackend(t, "b1")))
	nodes := e.form(3)
	n3 := nodes[2]
	n3.Signal(syscall.SIGTERM)
	if code := n3.Wait(30 * time.Second); code != 0 {
		t.Fatalf("n3 exit %d", code)
	}
	n3raft := e.RaftAddr("n3")
	peerLines := func() int {
		n := 0
		for _, a := range nodes[:2] {
			n += strings.Count(a.Stderr.String(), n3raft)
		}
		return n
	}
	testutil.Eventually(t, 30*time.Second, "the others notice n3 is down", func() bool { return peerLines() > 0 })
	// Raft retries a down peer several times a second: give it time to.
	<-time.After(5 * time.Second)
	restarted := e.startNode("n3", n3.dataDir, n3.extra...)
	testutil.Eventually(t, 30*time.Second, "n3 back", func() bool {
		st, _, _ := testutil.Get(t, http.DefaultClient, restarted.adminURL+"/readyz", nil)
		return st == 200
	})
	for _, a := range []*clusterAgent{nodes[0], nodes[1], restarted} {
		a.Signal(syscall.SIGTERM)
		a.Wait(30 * time.Second)
	}
	durations := 0
	for _, a := range []*clusterAgent{nodes[0], nodes[1], n3, restarted} {
		perPeerMsg := map[string]int{}
		for _, m := range logRecords(t, a.id, a.proc) {
			if m["level"] == "ERROR" {
				t.Errorf("%s: routine event logged as an error: %v", a.id, m)
			}
			// raft's retry backoff after a failed heartbeat to n3 is a
			// time.Duration: it prints as one ("50ms"), not nanoseconds.
			for _, k := range []string{"backoff time", "repeated_within"} {
				if v, ok := m[k]; ok {
					durations++
					if s, _ := v.(string); s == "" || func() bool { _, err := time.ParseDuration(s); return err != nil }() {
						t.Errorf("%s: %s is %v (%T), want a duration like \"50ms\": %v", a.id, k, v, v, m)
					}
				}
			}
			if aboutPeer(m, n3raft) || m["server-id"] == "n3" {
				if msg, _ := m["msg"].(string); strings.HasPrefix(msg, "failed to") {
					perPeerMsg[msg]++
				}
			}
		}
		for msg, n := range perPeerMsg {
			if n > 1 {
				t.Errorf("%s: %q about n3 logged %d times within 30 s, want at most once", a.id, msg, n)
			}
		}
	}
	if durations == 0 {
		t.Error("no line carried a duration (raft's \"failed to heartbeat to\" n3 has its backoff): the duration check proved nothing")
	}
}

// TestAgentLogsTextWhenAsked: --log-format text (or TETHER_LOG_FORMAT)
// writes readable lines instead of JSON.
func TestAgentLogsTextWhenAsked(t *testing.T) {
	b := testutil.NewBackend(t, "b1")
	cfg := t.TempDir() + "/tether.json"
	testutil.WriteFile(t, cfg, configFor(catchAll, b))
	for _, tc := range []struct {
		desc  string
		env   []string
		extra []string
	}{
		{"flag", nil, []string{"--log-format", "text"}},
		{"environment", []string{"TETHER_LOG_FORMAT=text"}, nil},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			p := start(t, tc.env, append([]string{"agent", "--config", cfg, "--node-id", "e2e", "--data-dir", t.TempDir(), "--admin-addr", "127.0.0.1:0", "--no-access-log"}, tc.extra...)...)
			testutil.Eventually(t, 60*time.Second, "node started", func() bool {
				return strings.Contains(p.Stderr.String(), `msg="node started"`)
			})
			if strings.Contains(p.Stderr.String(), `{"time"`) {
				t.Fatalf("JSON lines in text mode:\n%s", p.Stderr.String())
			}
			p.Signal(syscall.SIGTERM)
			p.Wait(30 * time.Second)
		})
	}
	p := start(t, nil, "agent", "--config", cfg, "--log-format", "yaml")
	if code := p.Wait(30 * time.Second); code == 0 || !strings.Contains(p.Stderr.String(), "json or text") {
		t.Fatalf("--log-format yaml: exit %d\n%s", code, p.Stderr.String())
	}
}

// aboutPeer says whether a raft line names the peer at addr (raft gives a
// peer as an address or as a server with an Address).
func aboutPeer(m map[string]any, addr string) bool {
	for _, k := range []string{"peer", "target"} {
		switch v := m[k].(type) {
		case string:
			if v == addr {
				return true
			}
		case map[string]any:
			if v["Address"] == addr {
				return true
			}
		}
	}
	return false
}
