package cluster

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/tether-proxy/tether/internal/logging"
)

// mlLogWriter forwards memberlist's "[LEVEL] memberlist: msg" lines to
// slog. memberlist says ERR when it cannot reach a peer, several times a
// second while that peer is down: those are warnings (the cluster runs with
// one fewer), and each such line is repeated at most once per
// peerErrorEvery, with the count held back.
type mlLogWriter struct {
	log   *slog.Logger
	limit *logging.Repeats
}

var _ io.Writer = (*mlLogWriter)(nil)

func newMLLogWriter(lg *slog.Logger) *mlLogWriter {
	return &mlLogWriter{log: lg, limit: logging.NewRepeats(peerErrorEvery, time.Now)}
}

// peerErrorEvery is how often a line about an unreachable peer is repeated.
const peerErrorEvery = 30 * time.Second

// mlPeerErrors start memberlist's lines about a peer it cannot reach.
var mlPeerErrors = []string{"Failed fallback ping", "Failed fallback TCP ping", "Push/Pull with ", "Failed to send gossip to ",
	"Failed to send UDP ping", "Failed to send indirect", "Failed to send UDP compound ping", "Failed to send ping", "Was able to connect to "}

func (w *mlLogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for _, pl := range []struct {
		prefix string
		level  slog.Level
	}{{"[DEBUG] ", slog.LevelDebug}, {"[INFO] ", slog.LevelInfo}, {"[WARN] ", slog.LevelWarn}, {"[ERR] ", slog.LevelError}} {
		if strings.HasPrefix(line, pl.prefix) {
			line, level = strings.TrimPrefix(line[len(pl.prefix):], "memberlist: "), pl.level
			break
		}
	}
	ctx := context.Background()
	if level >= slog.LevelWarn && strings.Contains(line, "use of closed network connection") {
		level = slog.LevelDebug // this node stopping while a probe was in flight
	}
	if strings.HasPrefix(line, "Conflicting address for ") {
		level = slog.LevelDebug // the conflict delegate says what it means (conflict.go)
	}
	var attrs []any
	if level >= slog.LevelWarn && strings.Contains(line, "no installed keys could decrypt") {
		// Someone else's packet: this node is fine; the sender (a node
		// given another secret) is told by its own join failing.
		level = slog.LevelWarn
		attrs = append(attrs, "hint", "a node with another cluster secret is trying to reach this one: give every node the same --cluster-secret-file")
	}
	if level >= slog.LevelWarn {
		if slices.ContainsFunc(mlPeerErrors, func(pre string) bool { return strings.HasPrefix(line, pre) }) {
			level = slog.LevelWarn
		}
		if !w.log.Enabled(ctx, level) {
			return len(p), nil
		}
		// The text before the first ": " names the event and the peer;
		// the rest is the error, which may vary.
		key, _, _ := strings.Cut(line, ": ")
		held, ok := w.limit.Allow(key)
		if !ok {
			return len(p), nil
		}
		if held > 0 {
			attrs = append(attrs, "repeated", held, "repeated_within", peerErrorEvery)
		}
	}
	w.log.Log(ctx, level, line, attrs...)
	return len(p), nil
}
