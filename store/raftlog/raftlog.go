package raftlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/tether-proxy/tether/internal/logging"
)

// raftLogger is an hclog.Logger (what raft wants) that logs into slog with
// typed values (durations print as durations). It sets each line's level by
// what the event means to an operator, not by raft's choice (see
// operatorLevel), and repeats a failing peer's error at most once per
// peerErrorEvery.
type raftLogger struct {
	l     *slog.Logger
	name  string
	args  []any
	limit *logging.Repeats
	// st is shared by the copies With and Named make.
	st *raftLogState
}

// raftLogState is what the level of a line may depend on besides the line.
type raftLogState struct {
	// snapIndex is the newest local snapshot's index (nil: unknown): a
	// missing log entry at or below it was compacted away, and raft sends
	// the snapshot instead.
	snapIndex func() uint64
	// campaigning: an election timed out and no leader or follower state
	// came since; the rounds that follow are one episode, not news.
	campaigning atomic.Bool
}

var _ hclog.Logger = (*raftLogger)(nil)

// New is raft's logger for module name (raft, raft-net, raft-snap), logging
// into l. snapIndex is the newest local snapshot's index (nil: unknown).
func New(l *slog.Logger, name string, snapIndex func() uint64) hclog.Logger {
	return &raftLogger{l: l, name: name, limit: logging.NewRepeats(peerErrorEvery, time.Now), st: &raftLogState{snapIndex: snapIndex}}
}

// peerErrorEvery is how often a down peer's replication or heartbeat error
// is logged: raft retries every few hundred milliseconds, which would be
// about three lines a second per down peer, for as long as the reap timeout.
const peerErrorEvery = 30 * time.Second

func (r *raftLogger) Log(level hclog.Level, msg string, args ...any) {
	ctx := context.Background()
	lv, limited := operatorLevel(r.name, msg, slogLevel(level), args)
	lv, limited = r.st.episode(msg, lv, limited, args)
	if !r.l.Enabled(ctx, lv) {
		return
	}
	attrs := []slog.Attr{slog.String("module", r.name)}
	attrs = appendArgs(attrs, r.args)
	attrs = appendArgs(attrs, args)
	if limited {
		n, ok := r.limit.Allow(r.name + "\x00" + msg + "\x00" + peerOf(args))
		if !ok {
			return
		}
		if n > 0 {
			attrs = append(attrs, slog.Int("repeated", n), slog.Duration("repeated_within", peerErrorEvery))
		}
	}
	r.l.LogAttrs(ctx, lv, msg, attrs...)
}

// peerErrors are raft's lines about one peer it cannot reach: a down peer
// is worth a warning (the cluster runs with one fewer), not an error a
// second.
var peerErrors = []string{
	"failed to heartbeat to", "failed to appendEntries to", "failed to contact",
	"failed to make requestVote RPC", "failed to pipeline appendEntries",
	"failed to start pipeline replication to", "failed to send snapshot to",
	"failed to install snapshot",
}

// Raft's lines of an election that did not end with a leader (no quorum
// reachable): a round about every election timeout, as long as it lasts.
const (
	msgElectionTimeout = "Election timeout reached, restarting election"
	msgCandidate       = "entering candidate state"
	msgPreVoteFailed   = "pre-vote campaign failed, waiting for election timeout"
)

// msgNoResolvedAddress is the transport's line when its
// ServerAddressProvider (store.Config.Resolve) fails.
const msgNoResolvedAddress = "unable to get address for server, using fallback address"

// operatorLevel maps one raft line to the level it deserves, and says
// whether it is to be rate-limited (a peer error, per peer; a repeated
// failed election).
func operatorLevel(module, msg string, lv slog.Level, args []any) (slog.Level, bool) {
	if slices.Contains(peerErrors, msg) {
		return slog.LevelWarn, true
	}
	err := argError(args)
	switch {
	case lv == slog.LevelInfo && routine(module, msg):
		return slog.LevelDebug, false
	case msg == msgElectionTimeout:
		// Quorum lost: once, then once per 30 s with the count.
		return slog.LevelWarn, true
	case strings.HasPrefix(msg, "appendEntries rejected"):
		// A follower's log behind or diverging from the leader's (every
		// formation, every restart after a missed entry): raft walks back
		// and sends what it lacks.
		return slog.LevelDebug, false
	case msg == "heartbeat timeout reached, starting election" && argString(args, "last-leader-id") == "":
		// No leader was ever known: the first election of a formation or
		// a restart, not a lost leader.
		return slog.LevelInfo, false
	case msg == msgNoResolvedAddress:
		// Config.Resolve does not know every server (no gossip yet, a
		// member gossip lost): the configuration's address is the rule,
		// and raft asks on every RPC.
		return slog.LevelDebug, false
	case msg == "no known peers, aborting election":
		// A node waiting to be added has no configuration yet: the node
		// says it waits to be added.
		return slog.LevelDebug, false
	case msg == "failed to take snapshot" && (errors.Is(err, raft.ErrNothingNewToSnapshot) || SnapshotNotYet(err)):
		// Every restart and every quiet snapshot interval: nothing to do;
		// or a joining node that has not applied its configuration yet.
		return slog.LevelDebug, false
	case strings.HasPrefix(msg, "failed to decode incoming command") || msg == "failed to flush response" || msg == "failed to accept connection":
		// A peer (or this node) closing its connection on a clean stop, or
		// this node's transport shutting down under a connection it serves.
		if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, raft.ErrTransportShutdown) ||
			(err != nil && strings.Contains(err.Error(), "use of closed network connection")) {
			return slog.LevelDebug, false
		}
	}
	return lv, false
}

// episode adjusts a line's level by what came before it: after an election
// timed out, the rounds that follow (a candidate state, a failed pre-vote)
// are debug until a leader or follower state ends the episode; and a log
// entry raft cannot find because a snapshot compacted it away (every
// follower after a restore, a follower far behind) is routine: raft sends
// the snapshot, logging that it does.
func (st *raftLogState) episode(msg string, lv slog.Level, limited bool, args []any) (slog.Level, bool) {
	switch msg {
	case msgElectionTimeout:
		st.campaigning.Store(true)
	case msgCandidate, msgPreVoteFailed:
		if st.campaigning.Load() {
			return slog.LevelDebug, false
		}
	case "entering leader state", "entering follower state":
		st.campaigning.Store(false)
	case "failed to get log":
		if st.snapIndex != nil && errors.Is(argError(args), raft.ErrLogNotFound) {
			if idx, ok := argUint(args, "index"); ok && idx <= st.snapIndex() {
				return slog.LevelDebug, false
			}
		}
	}
	return lv, limited
}

// argString is the string value of argument key ("" when absent).
func argString(args []any, key string) string {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == key {
			return fmt.Sprint(args[i+1])
		}
	}
	return ""
}

// argUint is the value of an unsigned integer argument.
func argUint(args []any, key string) (uint64, bool) {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == key {
			switch v := args[i+1].(type) {
			case uint64:
				return v, true
			case int:
				return uint64(v), v >= 0
			}
		}
	}
	return 0, false
}

// argError is the value of the "error" argument, if it is an error.
func argError(args []any) error {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == "error" || k == "err" {
			if e, ok := args[i+1].(error); ok {
				return e
			}
		}
	}
	return nil
}

// peerOf is the peer a line is about, for rate-limiting per peer.
func peerOf(args []any) string {
	for i := 0; i+1 < len(args); i += 2 {
		switch k, _ := args[i].(string); k {
		case "peer", "server-id", "target", "id":
			return fmt.Sprint(args[i+1])
		}
	}
	return ""
}

// clashing are keys raft uses that mean something else on our lines (the
// line's time, the node that logs it): they are renamed raft_<key>.
var clashing = []string{slog.TimeKey, slog.LevelKey, slog.MessageKey, slog.SourceKey, "node", "component", "module"}

// appendArgs turns hclog's key, value, key, value... into attributes.
func appendArgs(attrs []slog.Attr, args []any) []slog.Attr {
	for i := 0; i < len(args); i += 2 {
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprint(args[i])
		}
		if slices.Contains(clashing, key) {
			key = "raft_" + key
		}
		if i+1 == len(args) {
			attrs = append(attrs, slog.Any("EXTRA_VALUE_AT_END", args[i]))
			break
		}
		v := args[i+1]
		switch x := v.(type) {
		case hclog.Format:
			if len(x) > 0 {
				if format, ok := x[0].(string); ok {
					v = fmt.Sprintf(format, x[1:]...)
				}
			}
		case error:
			v = x.Error()
		case time.Duration:
		case fmt.Stringer:
			// A struct with a String method (raft's *Raft) would encode
			// as {} in JSON.
			v = x.String()
		}
		attrs = append(attrs, slog.Any(key, v))
	}
	return attrs
}

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace, hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (r *raftLogger) enabled(l hclog.Level) bool {
	return r.l.Enabled(context.Background(), slogLevel(l))
}

func (r *raftLogger) Trace(msg string, args ...any) { r.Log(hclog.Trace, msg, args...) }
func (r *raftLogger) Debug(msg string, args ...any) { r.Log(hclog.Debug, msg, args...) }
func (r *raftLogger) Info(msg string, args ...any)  { r.Log(hclog.Info, msg, args...) }
func (r *raftLogger) Warn(msg string, args ...any)  { r.Log(hclog.Warn, msg, args...) }
func (r *raftLogger) Error(msg string, args ...any) { r.Log(hclog.Error, msg, args...) }
func (r *raftLogger) IsTrace() bool                 { return r.enabled(hclog.Trace) }
func (r *raftLogger) IsDebug() bool                 { return r.enabled(hclog.Debug) }
func (r *raftLogger) IsInfo() bool                  { return r.enabled(hclog.Info) }
func (r *raftLogger) IsWarn() bool                  { return r.enabled(hclog.Warn) }
func (r *raftLogger) IsError() bool                 { return r.enabled(hclog.Error) }
func (r *raftLogger) ImpliedArgs() []any            { return r.args }
func (r *raftLogger) Name() string                  { return r.name }

func (r *raftLogger) With(args ...any) hclog.Logger {
	return &raftLogger{l: r.l, name: r.name, args: append(append([]any(nil), r.args...), args...), limit: r.limit, st: r.st}
}

func (r *raftLogger) Named(name string) hclog.Logger {
	return &raftLogger{l: r.l, name: r.name + "." + name, args: r.args, limit: r.limit, st: r.st}
}

func (r *raftLogger) ResetNamed(name string) hclog.Logger {
	return &raftLogger{l: r.l, name: name, args: r.args, limit: r.limit, st: r.st}
}

// SetLevel is ignored: the slog handler decides what is logged.
func (r *raftLogger) SetLevel(hclog.Level) {}

func (r *raftLogger) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Debug, hclog.Info, hclog.Warn} {
		if r.enabled(l) {
			return l
		}
	}
	return hclog.Error
}

func (r *raftLogger) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(r.l.With("module", r.name).Handler(), slog.LevelInfo)
}

func (r *raftLogger) StandardWriter(o *hclog.StandardLoggerOptions) io.Writer {
	return r.StandardLogger(o).Writer()
}

// routine reports raft info lines that every snapshot produces (one per
// keyring or drain change here): debug, so elections and membership stand
// out at info.
func routine(module, msg string) bool {
	if strings.HasSuffix(module, "raft-snap") {
		return true
	}
	for _, p := range []string{"starting snapshot up to", "snapshot complete up to", "compacting logs"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// SnapshotNotYet reports raft's refusal to snapshot before the latest
// configuration entry is applied (a node that just joined): a matter of
// moments, not of the disk.
func SnapshotNotYet(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "cannot take snapshot now")
}
