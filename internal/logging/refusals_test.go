package logging

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRefusalsCountAllLogOncePerWindow: every refusal is counted; a reason
// is logged once per window, the next line saying how many were held back.
func TestRefusalsCountAllLogOncePerWindow(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	r := NewRefusals(slog.New(slog.NewTextHandler(&buf, nil)), "refused", time.Minute, func() time.Time { return now })
	for range 5 {
		r.Note("a", "1.2.3.4:5", errors.New("no"))
	}
	r.Note("b", "1.2.3.4:5", errors.New("no"))
	now = now.Add(time.Minute)
	r.Note("a", "1.2.3.4:5", errors.New("no"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "reason=a") || !strings.Contains(lines[2], "repeated=4 repeated_within=1m0s") {
		t.Fatalf("lines:\n%s\nwant 3, the last a's with repeated=4", buf.String())
	}
	if c := r.Counts(); c["a"] != 6 || c["b"] != 1 || len(c) != 2 {
		t.Fatalf("counts %v, want a:6 b:1", c)
	}
}
