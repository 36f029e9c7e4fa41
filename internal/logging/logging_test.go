package logging

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

func TestEveryLineHasEachKeyOnce(t *testing.T) {
	for _, tc := range []struct {
		desc string
		log  func(l *slog.Logger)
		want map[string]any
	}{
		{"a narrower With replaces the wider one", func(l *slog.Logger) {
			l.With("component", "raft").With("component", "store").Info("m")
		}, map[string]any{"component": "store"}},
		{"a record key that is a builtin key is renamed", func(l *slog.Logger) {
			l.Info("m", "time", 5, "level", "x", "msg", "y")
		}, map[string]any{"time_2": 5.0, "level_2": "x", "msg_2": "y", "msg": "m"}},
		{"a record key clashing with a With key is renamed", func(l *slog.Logger) {
			l.With("node", "n1").Info("m", "node", "other")
		}, map[string]any{"node": "n1", "node_2": "other"}},
		{"the same value twice is kept once", func(l *slog.Logger) {
			l.With("node", "n1").Info("m", "node", "n1")
		}, map[string]any{"node": "n1"}},
		{"keys inside a group are unique within it", func(l *slog.Logger) {
			l.With("a", 1).WithGroup("g").With("a", 2).Info("m", "a", 3)
		}, map[string]any{"a": 1.0, "g": map[string]any{"a": 2.0, "a_2": 3.0}}},
		{"record attrs clashing among themselves", func(l *slog.Logger) {
			l.Info("m", "k", 1, "k", 2, "k", []int{3})
		}, map[string]any{"k": 1.0, "k_2": 2.0, "k_3": []any{3.0}}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			var buf bytes.Buffer
			l, err := New(&buf, FormatJSON, slog.LevelDebug)
			if err != nil {
				t.Fatal(err)
			}
			tc.log(l)
			dups, err := testutil.DuplicateKeys(buf.Bytes())
			if err != nil || len(dups) > 0 {
				t.Fatalf("line %s: duplicate keys %v (%v)", buf.String(), dups, err)
			}
			var m map[string]any
			if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if fmt.Sprint(m[k]) != fmt.Sprint(v) {
					t.Errorf("%s = %v, want %v in %s", k, m[k], v, buf.String())
				}
			}
		})
	}
}

func TestTextFormatIsReadable(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(&buf, FormatText, slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	l.With("node", "n1").Info("node started", "admin", "127.0.0.1:9901")
	if s := buf.String(); !strings.Contains(s, `msg="node started" node=n1 admin=127.0.0.1:9901`) || strings.HasPrefix(s, "{") {
		t.Fatalf("text line: %q", s)
	}
	if _, err := New(io.Discard, "yaml", slog.LevelInfo); err == nil || !strings.Contains(err.Error(), "auto, json or text") {
		t.Fatalf("unknown format: %v", err)
	}
}

// TestDurationsPrintAsDurations: slog's JSON handler writes a
// time.Duration as nanoseconds; a line says "30s", in groups too.
func TestDurationsPrintAsDurations(t *testing.T) {
	for _, format := range []string{FormatJSON, FormatText} {
		var buf bytes.Buffer
		l, err := New(&buf, format, slog.LevelInfo)
		if err != nil {
			t.Fatal(err)
		}
		l.WithGroup("g").Info("m", "repeated_within", 30*time.Second, "backoff time", 1500*time.Microsecond)
		for _, want := range []string{`30s`, `1.5ms`} {
			if !strings.Contains(buf.String(), want) || strings.Contains(buf.String(), "30000000000") {
				t.Errorf("%s: want %s in %s", format, want, buf.String())
			}
		}
	}
}

// TestAutoFormatIsJSONUnlessATerminal: auto writes JSON to a pipe or a
// buffer (a terminal is tested through the built binary).
func TestAutoFormatIsJSONUnlessATerminal(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(&buf, FormatAuto, slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("m")
	if !json.Valid(buf.Bytes()) {
		t.Fatalf("auto to a buffer: %q", buf.String())
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if IsTerminal(w) {
		t.Fatal("a pipe taken for a terminal")
	}
}
