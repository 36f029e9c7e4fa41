package cluster

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// dialFrom connects to addr from the loopback address ip (127.0.0.0/8).
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// announce sends an encrypted frame's header announcing n bytes, and some
// of them.
func announce(t *testing.T, c net.Conn, n uint32, send int) {
	t.Helper()
	b := binary.BigEndian.AppendUint32([]byte{encryptMsg}, n)
	if _, err := c.Write(append(b, make([]byte, send)...)); err != nil {
		t.Fatal(err)
	}
}

// closedWithin reports whether the node closed c within d, sending nothing.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	n, err := c.Read(make([]byte, 1))
	if n > 0 {
		return false
	}
	ne, ok := err.(net.Error)
	return err != nil && !(ok && ne.Timeout())
}

// sealedFrame is a whole encrypted stream frame under key, as memberlist
// writes one.
func sealedFrame(t testing.TB, key []byte, plain []byte) []byte {
	t.Helper()
	block, _ := aes.NewCipher(key)
	gcm, _ := cipher.NewGCM(block)
	n := 1 + 12 + len(plain) + 16
	hdr := binary.BigEndian.AppendUint32([]byte{encryptMsg}, uint32(n))
	nonce := make([]byte, 12)
	rand.Read(nonce)
	out := append(append(append([]byte(nil), hdr...), 1), nonce...)
	return gcm.Seal(out, nonce, plain, hdr)
}

// TestGossipStreamsAreBoundedBeforeTheyProveTheKey: through raw sockets on
// the gossip port, a frame larger than any member sends is refused at its
// header; one source gets at most maxPreAuthPerSource streams and
// maxPreAuthSourceBytes announced in large frames, all sources
// maxPreAuthBytes, the rest closed at once, while small frames still pass; a whole frame under another key is refused (memberlist
// answers it); each is counted by reason, and a member still joins.
func TestGossipStreamsAreBoundedBeforeTheyProveTheKey(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out LAN timing's 5 s handshake deadline")
	}
	n1 := startNode(t, "n1", func(c *Config) { c.Timing = LAN }) // LAN: streams may take 5 s to prove the key
	addr := n1.Addr()

	huge := dialFrom(t, "127.0.0.1", addr)
	announce(t, huge, 20<<20, 64<<10)
	if !closedWithin(huge, 2*time.Second) {
		t.Fatal("a stream announcing a 20 MiB frame stayed open")
	}

	// One source: 8 streams waiting, the 9th refused at once.
	var held []net.Conn
	for range maxPreAuthPerSource {
		c := dialFrom(t, "127.0.0.2", addr)
		announce(t, c, 1<<10, 10)
		held = append(held, c)
	}
	testutil.Eventually(t, 5*time.Second, "8 streams waiting", func() bool { return n1.guard.streamsWaiting() == 8 })
	extra := dialFrom(t, "127.0.0.2", addr)
	announce(t, extra, 1<<10, 10)
	if !closedWithin(extra, 2*time.Second) {
		t.Fatal("a 9th waiting stream from one address was kept")
	}
	// One source's bytes: 8 MiB announced by one stream, the next refused.
	big := dialFrom(t, "127.0.0.3", addr)
	announce(t, big, maxPreAuthSourceBytes, 10)
	testutil.Eventually(t, 5*time.Second, "8 MiB waiting from 127.0.0.3", func() bool { return n1.guard.waiting() == maxPreAuthSourceBytes })
	more := dialFrom(t, "127.0.0.3", addr)
	announce(t, more, smallFrame+1, 10)
	if !closedWithin(more, 2*time.Second) {
		t.Fatal("a source past its bytes was kept")
	}
	held = append(held, big)
	// All sources: 32 MiB in all.
	for i, n := range []uint32{maxPreAuthSourceBytes, maxPreAuthSourceBytes, maxPreAuthSourceBytes} {
		c := dialFrom(t, "127.0.0."+string(rune('4'+i)), addr)
		announce(t, c, n, 10)
		held = append(held, c)
	}
	testutil.Eventually(t, 5*time.Second, "32 MiB waiting", func() bool { return n1.guard.waiting() == maxPreAuthBytes })
	over := dialFrom(t, "127.0.0.7", addr)
	announce(t, over, smallFrame+1, 10)
	if !closedWithin(over, 2*time.Second) {
		t.Fatal("a stream past the total bytes was kept")
	}

	// A member joins meanwhile (its frames are small): its stream proves
	// the key at once.
	n2 := startNode(t, "n2", func(c *Config) { c.Timing = LAN })
	mustJoin(t, n2, n1)

	// A whole frame under another key.
	other, _ := GossipKey([]byte("another cluster's secret"))
	wrong := dialFrom(t, "127.0.0.8", addr)
	wrong.Write(sealedFrame(t, other, []byte{6, 0x80}))
	testutil.Eventually(t, 5*time.Second, "the wrong key counted", func() bool { return n1.StreamsRefused()[StreamWrongKey] == 1 })

	// The waiting streams time out and give their room back.
	for _, c := range held {
		if !closedWithin(c, 10*time.Second) {
			t.Fatal("a stream that never finished its frame stayed open past the timeout")
		}
	}
	testutil.Eventually(t, 5*time.Second, "nothing waiting", func() bool { return n1.guard.waiting() == 0 && n1.guard.streamsWaiting() == 0 })
	testutil.Eventually(t, 5*time.Second, "every refusal counted by reason", func() bool {
		got := n1.StreamsRefused()
		return got[StreamTooLarge] == 1 && got[StreamBusy] == 3 && got[StreamTimeout] == 12 && got[StreamWrongKey] == 1
	})
}

// TestGossipKeyRotation: three members on the old secret install the new
// one, switch to it one at a time (members that have not switched still
// read them) and drop the old one: a node with the old secret cannot join
// then, one with the new secret can.
func TestGossipKeyRotation(t *testing.T) {
	oldS, newS := testSecret, []byte("the new tether cluster test secret")
	n1, n2, n3 := joinedThree(t)
	all := []*Membership{n1, n2, n3}
	for _, m := range all {
		if err := m.SetSecrets(oldS, [][]byte{oldS, newS}); err != nil {
			t.Fatal(err)
		}
	}
	if err := n1.SetSecrets(newS, [][]byte{oldS}); err != nil {
		t.Fatal(err)
	}
	if err := n1.UpdateMeta(func(m *Meta) { m.ClusterID = "c1" }); err != nil {
		t.Fatal(err)
	}
	for _, m := range all[1:] {
		testutil.Eventually(t, 5*time.Second, "n1's meta under the new key reaches the others", func() bool {
			x, _ := member(m, "n1")
			return x.ClusterID == "c1"
		})
	}
	for _, m := range all {
		if err := m.SetSecrets(newS, nil); err != nil {
			t.Fatal(err)
		}
		if k := m.keyring.GetKeys(); len(k) != 1 {
			t.Fatalf("%d gossip keys after the old one is removed", len(k))
		}
	}
	stale := startNode(t, "stale", nil)
	if _, err := stale.Join([]string{n2.Addr()}); err == nil || !strings.Contains(err.Error(), "cluster secret") {
		t.Fatalf("a node with the removed secret joined: %v", err)
	}
	fresh := startNode(t, "fresh", func(c *Config) { c.Secret = newS })
	mustJoin(t, fresh, n3)
	testutil.Eventually(t, 5*time.Second, "4 alive, the stale node out", func() bool { return aliveIDs(n1) == "fresh,n1,n2,n3" })
	testutil.Eventually(t, 5*time.Second, "the stale node's stream refused", func() bool { return n2.StreamsRefused()[StreamWrongKey] > 0 })
}
