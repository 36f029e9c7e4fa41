package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"

	"golang.org/x/term"
)

// Formats are the values of --log-format.
const (
	// FormatAuto is text when the output is a terminal (a person reads
	// it), JSON otherwise (a pipe, a file, journald: a log pipeline
	// parses it).
	FormatAuto = "auto"
	FormatJSON = "json"
	FormatText = "text"
)

// New returns a logger writing format ("auto", "json" or "text"; "" is
// json) to w at level and above, whose lines carry each key once and
// print durations as durations ("30s"), in JSON too.
func New(w io.Writer, format string, level slog.Leveler) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationText}
	if format == FormatAuto {
		format = FormatJSON
		if IsTerminal(w) {
			format = FormatText
		}
	}
	var h slog.Handler
	switch format {
	case "", FormatJSON:
		h = slog.NewJSONHandler(w, opts)
	case FormatText:
		h = slog.NewTextHandler(w, opts)
	default:
		return nil, fmt.Errorf("log format %q: want auto, json or text", format)
	}
	return slog.New(UniqueKeys(h)), nil
}

// IsTerminal says whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// durationText writes a duration as Go writes it ("30s", "1.5ms"): slog's
// JSON handler would write nanoseconds (30000000000), which no reader
// takes for thirty seconds.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// UniqueKeys wraps h so that a line never repeats a key. An attribute added
// with Logger.With replaces an earlier one of the same key (the narrower
// logger knows better: component "store" within component "raft"); a
// record attribute that clashes with the line's own keys (time, level,
// msg) or with a With attribute keeps both values, the later one renamed
// key_2 (key_3, ...), unless it repeats the same value.
func UniqueKeys(h slog.Handler) slog.Handler {
	return &uniqueHandler{inner: h, attrs: [][]slog.Attr{nil}}
}

type uniqueHandler struct {
	inner  slog.Handler
	groups []string      // open groups, outermost first
	attrs  [][]slog.Attr // attrs[0] at the top, attrs[i] inside groups[i-1]
}

var _ slog.Handler = (*uniqueHandler)(nil)

func (h *uniqueHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *uniqueHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return h
	}
	c := h.clone()
	last := len(c.attrs) - 1
	level := slices.Clone(c.attrs[last])
	for _, a := range as {
		if a.Equal(slog.Attr{}) {
			continue
		}
		if i := slices.IndexFunc(level, func(b slog.Attr) bool { return b.Key == a.Key }); i >= 0 && a.Key != "" {
			level[i] = a
			continue
		}
		level = append(level, a)
	}
	c.attrs[last] = level
	return c
}

func (h *uniqueHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := h.clone()
	c.groups = append(c.groups, name)
	c.attrs = append(c.attrs, nil)
	return c
}

func (h *uniqueHandler) clone() *uniqueHandler {
	return &uniqueHandler{inner: h.inner, groups: slices.Clone(h.groups), attrs: slices.Clone(h.attrs)}
}

// builtin are the keys every line has at the top.
var builtin = []string{slog.TimeKey, slog.LevelKey, slog.MessageKey, slog.SourceKey}

func (h *uniqueHandler) Handle(ctx context.Context, r slog.Record) error {
	last := len(h.attrs) - 1
	level := slices.Clone(h.attrs[last])
	r.Attrs(func(a slog.Attr) bool {
		level = addUnique(level, a, last == 0)
		return true
	})
	for i := last; i > 0; i-- {
		outer := slices.Clone(h.attrs[i-1])
		level = addUnique(outer, slog.Attr{Key: h.groups[i-1], Value: slog.GroupValue(level...)}, i == 1)
	}
	nr := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	nr.AddAttrs(level...)
	return h.inner.Handle(ctx, nr)
}

// addUnique appends a to attrs, renaming it when its key is taken.
func addUnique(attrs []slog.Attr, a slog.Attr, top bool) []slog.Attr {
	if a.Equal(slog.Attr{}) {
		return attrs
	}
	if a.Key == "" && a.Value.Kind() == slog.KindGroup { // an inline group: its members join this level
		for _, m := range a.Value.Group() {
			attrs = addUnique(attrs, m, top)
		}
		return attrs
	}
	taken := func(k string) bool {
		if top && slices.Contains(builtin, k) {
			return true
		}
		return slices.ContainsFunc(attrs, func(b slog.Attr) bool { return b.Key == k })
	}
	if !taken(a.Key) {
		return append(attrs, a)
	}
	if i := slices.IndexFunc(attrs, func(b slog.Attr) bool { return b.Key == a.Key }); i >= 0 && sameValue(attrs[i].Value, a.Value) {
		return attrs
	}
	base := a.Key
	for n := 2; ; n++ {
		if k := base + "_" + strconv.Itoa(n); !taken(k) {
			a.Key = k
			return append(attrs, a)
		}
	}
}

// sameValue compares scalar values only: Value.Equal panics on
// uncomparable values of kind Any.
func sameValue(a, b slog.Value) bool {
	a, b = a.Resolve(), b.Resolve()
	if a.Kind() != b.Kind() || a.Kind() == slog.KindAny || a.Kind() == slog.KindGroup {
		return false
	}
	return a.Equal(b)
}
