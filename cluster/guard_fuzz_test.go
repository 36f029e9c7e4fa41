package cluster

import (
	"bytes"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// FuzzGuardFirstFrame feeds anything as a gossip stream's first bytes: the
// guard never panics, passes a stream only when its frame opens with the
// key (and then the bytes it read are the stream's own), and gives back
// every slot and byte it took.
func FuzzGuardFirstFrame(f *testing.F) {
	key, _ := GossipKey(testSecret)
	other, _ := GossipKey([]byte("another cluster's secret"))
	f.Add(sealedFrame(f, key, []byte{6, 0x80}))
	f.Add(sealedFrame(f, other, []byte{6, 0x80}))
	f.Add([]byte{encryptMsg, 0, 0, 0, 40, 1})
	f.Add([]byte{encryptMsg, 0x01, 0x40, 0, 0})
	f.Add([]byte{6, 0x80})
	f.Add([]byte{})
	kr, err := memberlist.NewKeyring(nil, key)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &guardedTransport{
			keyring: kr, log: slog.New(slog.DiscardHandler), timeout: 200 * time.Millisecond,
			stop: make(chan struct{}), bySource: map[string]*sourceUse{}, reading: map[net.Conn]struct{}{},
			refused: newRefusals(slog.New(slog.DiscardHandler)),
		}
		c, peer := net.Pipe()
		defer c.Close()
		go func() {
			peer.Write(data)
			peer.Close()
		}()
		if !g.admit(c, "src") {
			t.Fatal("no slot for the first stream")
		}
		reserved := 0
		frame, reason, err := g.readFrame(c, "src", &reserved)
		g.release(c, "src", reserved)
		if g.waiting() != 0 || g.streamsWaiting() != 0 {
			t.Fatalf("after the stream: %d bytes and %d streams still held", g.waiting(), g.streamsWaiting())
		}
		if err != nil {
			if reason == "" {
				t.Fatalf("refused without a reason: %v", err)
			}
			return
		}
		if !bytes.HasPrefix(data, frame) || len(frame) < 5+29 {
			t.Fatalf("passed %d bytes that are not the stream's first frame", len(frame))
		}
		if _, err := g.verify(frame[:5], frame[5:]); err != nil {
			t.Fatalf("passed a frame that does not open: %v", err)
		}
	})
}
