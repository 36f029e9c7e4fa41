package store

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// raftLogger is an hclog.Logger (what raft wants) that logs into slog with
// typed values (durations print as durations).
type raftLogger struct {
	l    *slog.Logger
	name string
	args []any
}

var _ hclog.Logger = (*raftLogger)(nil)

func newRaftLogger(l *slog.Logger, name string) hclog.Logger { return &raftLogger{l: l, name: name} }

func (r *raftLogger) Log(level hclog.Level, msg string, args ...any) {
	lv := slogLevel(level)
	if lv == slog.LevelInfo && routine(r.name, msg) {
		lv = slog.LevelDebug
	}
	ctx := context.Background()
	if !r.l.Enabled(ctx, lv) {
		return
	}
	attrs := []slog.Attr{slog.String("module", r.name)}
	attrs = appendArgs(attrs, r.args)
	attrs = appendArgs(attrs, args)
	r.l.LogAttrs(ctx, lv, msg, attrs...)
}

// appendArgs turns hclog's key, value, key, value... into attributes.
func appendArgs(attrs []slog.Attr, args []any) []slog.Attr {
	for i := 0; i < len(args); i += 2 {
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprint(args[i])
		}
		if i+1 == len(args) {
			attrs = append(attrs, slog.Any("EXTRA_VALUE_AT_END", args[i]))
			break
		}
		v := args[i+1]
		if f, ok := v.(hclog.Format); ok && len(f) > 0 {
			if format, ok := f[0].(string); ok {
				v = fmt.Sprintf(format, f[1:]...)
			}
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
	return &raftLogger{l: r.l, name: r.name, args: append(append([]any(nil), r.args...), args...)}
}

func (r *raftLogger) Named(name string) hclog.Logger {
	return &raftLogger{l: r.l, name: r.name + "." + name, args: r.args}
}

func (r *raftLogger) ResetNamed(name string) hclog.Logger {
	return &raftLogger{l: r.l, name: name, args: r.args}
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
