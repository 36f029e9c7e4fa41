package cluster

import (
	"bytes"
	"log"
	"log/slog"
	"strings"
	"testing"
)

// TestMemberlistDownPeerLinesAreRateLimitedWarnings: memberlist logs ERR
// several times a second for a peer it cannot reach; the node logs a
// warning once per peer and window.
func TestMemberlistDownPeerLinesAreRateLimitedWarnings(t *testing.T) {
	var buf bytes.Buffer
	ml := log.New(newMLLogWriter(slog.New(slog.NewTextHandler(&buf, nil))), "", 0)
	for i := 0; i < 50; i++ {
		ml.Printf("[ERR] memberlist: Push/Pull with n2 failed: dial tcp 127.0.0.1:7947: connect: connection refused")
		ml.Printf("[ERR] memberlist: Failed fallback ping: EOF")
	}
	ml.Printf("[ERR] memberlist: Push/Pull with n3 failed: dial tcp 127.0.0.1:7948: connect: connection refused")
	ml.Printf("[INFO] memberlist: Suspect n2 has failed, no acks received")
	out := buf.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || strings.Count(out, "level=WARN") != 3 || strings.Contains(out, "level=ERROR") {
		t.Fatalf("want 3 warnings (n2, fallback ping, n3) and 1 info:\n%s", out)
	}
}
