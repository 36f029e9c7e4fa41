package raftlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/tether-proxy/tether/internal/logging"
)

// raftLines logs through the raft adapter the way node wires it (a logger
// with node and component) and returns the JSON lines.
func raftLines(t *testing.T, module string, log func(l hclog.Logger)) []map[string]any {
	t.Helper()
	var buf bytes.Buffer
	l, err := logging.New(&buf, logging.FormatJSON, slog.LevelDebug)
	if err != nil {
		t.Fatal(err)
	}
	log(New(l.With("node", "n1").With("component", "raft"), module, nil))
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if n := strings.Count(line, `"time":`) + strings.Count(line, `"node":`); n != 2 {
			t.Fatalf("line repeats time or node: %s", line)
		}
		out = append(out, m)
	}
	return out
}

type fakeRaftNode struct{ addr string }

func (f *fakeRaftNode) String() string { return "Node at " + f.addr + " [Candidate]" }

// TestRaftLinesKeepTheirOwnTimeAndNode: raft's own "time" (a duration) and
// "node" (the Raft value) would collide with the line's time and node id;
// they are renamed raft_time and raft_node, the duration prints as one and
// the node readably.
func TestRaftLinesKeepTheirOwnTimeAndNode(t *testing.T) {
	lines := raftLines(t, "raft", func(l hclog.Logger) {
		l.Warn("failed to contact", "server-id", "n2", "time", 254786370*time.Nanosecond)
		l.Info("entering candidate state", "node", &fakeRaftNode{"127.0.0.1:7000"}, "term", 2)
	})
	if len(lines) != 2 {
		t.Fatalf("lines: %v", lines)
	}
	if ts, _ := lines[0]["time"].(string); !strings.HasPrefix(ts, "20") || lines[0]["raft_time"] != "254.78637ms" {
		t.Errorf("failed to contact: time %v raft_time %v", lines[0]["time"], lines[0]["raft_time"])
	}
	if lines[1]["node"] != "n1" || lines[1]["raft_node"] != "Node at 127.0.0.1:7000 [Candidate]" {
		t.Errorf("entering candidate state: node %v raft_node %v", lines[1]["node"], lines[1]["raft_node"])
	}
}

// TestRaftLevelsSayWhatTheEventMeans: routine events of a restart or a
// clean stop are debug, not errors; a down peer is a warning.
func TestRaftLevelsSayWhatTheEventMeans(t *testing.T) {
	closed := &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}
	for _, tc := range []struct {
		desc, module, msg string
		level             hclog.Level
		args              []any
		want              string
	}{
		{"nothing new to snapshot on restart", "raft", "failed to take snapshot", hclog.Error, []any{"error", raft.ErrNothingNewToSnapshot}, "DEBUG"},
		{"a joining node's snapshot before its configuration is applied", "raft", "failed to take snapshot", hclog.Error, []any{"error", errors.New("cannot take snapshot now, wait until the configuration entry at 7 has been applied (have applied 6)")}, "DEBUG"},
		{"a snapshot that really failed", "raft", "failed to take snapshot", hclog.Error, []any{"error", errors.New("disk full")}, "ERROR"},
		{"a closed connection on a clean stop", "raft-net", "failed to decode incoming command", hclog.Error, []any{"error", closed}, "DEBUG"},
		{"a closed connection as text", "raft-net", "failed to decode incoming command", hclog.Error, []any{"error", errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: use of closed network connection")}, "DEBUG"},
		{"the transport shutting down under a connection", "raft-net", "failed to decode incoming command", hclog.Error, []any{"error", raft.ErrTransportShutdown}, "DEBUG"},
		{"a garbled command", "raft-net", "failed to decode incoming command", hclog.Error, []any{"error", errors.New("msgpack decode error")}, "ERROR"},
		{"a down peer's heartbeat", "raft", "failed to heartbeat to", hclog.Error, []any{"peer", "127.0.0.1:7001", "backoff time", time.Second, "error", errors.New("dial tcp: connection refused")}, "WARN"},
		{"an election", "raft", "entering leader state", hclog.Info, []any{"leader", "x"}, "INFO"},
		{"a follower's log behind the leader's", "raft", "appendEntries rejected, sending older logs", hclog.Warn, []any{"peer", "n2", "next", uint64(3)}, "DEBUG"},
		{"the first election of a formation", "raft", "heartbeat timeout reached, starting election", hclog.Warn, []any{"last-leader-addr", "", "last-leader-id", ""}, "INFO"},
		{"a lost leader", "raft", "heartbeat timeout reached, starting election", hclog.Warn, []any{"last-leader-addr", "127.0.0.1:7001", "last-leader-id", "n2"}, "WARN"},
		{"a node waiting to be added", "raft", "no known peers, aborting election", hclog.Warn, nil, "DEBUG"},
		{"a server the resolver does not know", "raft-net", "unable to get address for server, using fallback address", hclog.Warn, []any{"id", "n2", "fallback", "127.0.0.1:7001", "error", errors.New("unknown")}, "DEBUG"},
		{"a missing entry no snapshot covers", "raft", "failed to get log", hclog.Error, []any{"index", uint64(9), "error", raft.ErrLogNotFound}, "ERROR"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			lines := raftLines(t, tc.module, func(l hclog.Logger) { l.Log(tc.level, tc.msg, tc.args...) })
			if len(lines) != 1 || lines[0]["level"] != tc.want {
				t.Fatalf("got %v, want one line at %s", lines, tc.want)
			}
		})
	}
}

// jsonLogger is the raft adapter writing JSON lines at level and above
// into the buffer returned; with now, its repeat limit reads that clock.
func jsonLogger(level slog.Level, now *time.Time) (*raftLogger, *bytes.Buffer) {
	buf := new(bytes.Buffer)
	l, _ := logging.New(buf, logging.FormatJSON, level)
	rl := New(l, "raft", nil).(*raftLogger)
	if now != nil {
		rl.limit = logging.NewRepeats(peerErrorEvery, func() time.Time { return *now })
	}
	return rl, buf
}

// TestDownPeerErrorRepeatsAtMostEvery30s: raft retries a down peer several
// times a second; the line goes out once per 30 s per peer, then with the
// count held back.
func TestDownPeerErrorRepeatsAtMostEvery30s(t *testing.T) {
	now := time.Unix(1000, 0)
	rl, buf := jsonLogger(slog.LevelDebug, &now)
	for i := 0; i < 93; i++ { // 30 s of a down peer at raft's pace
		rl.Error("failed to heartbeat to", "peer", "127.0.0.1:7001", "error", errors.New("connection refused"))
		if i%10 == 0 {
			rl.Error("failed to heartbeat to", "peer", "127.0.0.1:7002", "error", errors.New("connection refused"))
		}
		now = now.Add(30 * time.Second / 93)
	}
	now = now.Add(time.Second)
	rl.Error("failed to heartbeat to", "peer", "127.0.0.1:7001", "error", errors.New("connection refused"))
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		json.Unmarshal([]byte(line), &m)
		got = append(got, fmt.Sprintf("%v %v", m["peer"], m["repeated"]))
	}
	want := []string{"127.0.0.1:7001 <nil>", "127.0.0.1:7002 <nil>", "127.0.0.1:7001 92"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("lines %v, want %v\n%s", got, want, buf.String())
	}
}

// TestQuorumLossLogsOneElectionEpisode: with no quorum, raft times out an
// election about every second and starts the next (three lines a round);
// the operator gets the first round and then one line per 30 s counting
// the rounds held back, and a leader ends the episode.
func TestQuorumLossLogsOneElectionEpisode(t *testing.T) {
	now := time.Unix(1000, 0)
	rl, buf := jsonLogger(slog.LevelInfo, &now)
	rl.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "127.0.0.1:7001", "last-leader-id", "n2")
	for i := 0; i < 40; i++ { // 40 s without a quorum
		rl.Info("entering candidate state", "term", 3)
		rl.Info("pre-vote campaign failed, waiting for election timeout", "term", 3)
		rl.Warn("Election timeout reached, restarting election")
		now = now.Add(time.Second)
	}
	rl.Info("entering candidate state", "term", 3)
	rl.Info("entering leader state", "leader", "x")
	rl.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "127.0.0.1:7001", "last-leader-id", "n1")
	rl.Info("entering candidate state", "term", 4)
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		json.Unmarshal([]byte(line), &m)
		s := fmt.Sprintf("%v %v", m["level"], m["msg"])
		if m["repeated"] != nil {
			s += fmt.Sprintf(" repeated=%v", m["repeated"])
		}
		got = append(got, s)
	}
	want := []string{
		"WARN heartbeat timeout reached, starting election",
		"INFO entering candidate state",
		"INFO pre-vote campaign failed, waiting for election timeout",
		"WARN Election timeout reached, restarting election",
		"WARN Election timeout reached, restarting election repeated=29",
		"INFO entering leader state",
		"WARN heartbeat timeout reached, starting election",
		"INFO entering candidate state",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCompactedEntryIsNotAnError: after a restore (or for a follower far
// behind) raft looks for an entry a snapshot compacted away and sends the
// snapshot instead; that lookup is debug. An entry above the snapshot that
// is missing stays an error.
func TestCompactedEntryIsNotAnError(t *testing.T) {
	rl, buf := jsonLogger(slog.LevelInfo, nil)
	rl.st.snapIndex = func() uint64 { return 6 }
	rl.Error("failed to get log", "index", uint64(6), "error", raft.ErrLogNotFound)
	rl.Error("failed to get log", "index", uint64(5), "error", raft.ErrLogNotFound)
	if buf.Len() != 0 {
		t.Fatalf("compacted entries logged: %s", buf.String())
	}
	rl.Error("failed to get log", "index", uint64(7), "error", raft.ErrLogNotFound)
	if !strings.Contains(buf.String(), `"level":"ERROR"`) {
		t.Fatalf("a missing entry above the snapshot: %q", buf.String())
	}
}
