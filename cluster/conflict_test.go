package cluster

import (
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// claims collects the IDConflicts a node is told of.
func claims(cfg *Config) chan IDConflict {
	ch := make(chan IDConflict, 16)
	cfg.OnIDConflict = func(c IDConflict) {
		select {
		case ch <- c:
		default:
		}
	}
	return ch
}

// TestALiveClaimOnAnIDIsToldApartFromAnEarlierAddress: a second live
// process under a member's id learns that a live node holds it (and where),
// and so does that member; a member restarted at once on a new address,
// while the peers still hold its old one, learns that nothing answers there.
func TestALiveClaimOnAnIDIsToldApartFromAnEarlierAddress(t *testing.T) {
	n1 := startNode(t, "n1", nil)
	var n2Claims chan IDConflict
	n2 := startNode(t, "n2", func(c *Config) { n2Claims = claims(c) })
	mustJoin(t, n2, n1)

	var dupClaims chan IDConflict
	dup := startNode(t, "n2", func(c *Config) {
		dupClaims = claims(c)
		c.Meta.RaftAddr = "127.0.0.1:7999"
	})
	if _, err := dup.Join([]string{n1.Addr()}); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-dupClaims:
		if !c.Live || c.Theirs != n2.Addr() || c.Mine != dup.Addr() || c.TheirMeta.RaftAddr != "127.0.0.1:7000" {
			t.Fatalf("the duplicate was told %+v, want a live claim by %s", c, n2.Addr())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the duplicate was not told its id is taken")
	}
	testutil.Eventually(t, 10*time.Second, "n2 told of the duplicate", func() bool {
		select {
		case c := <-n2Claims:
			return c.Live && c.Theirs == dup.Addr() && c.TheirMeta.RaftAddr == "127.0.0.1:7999"
		default:
			return false
		}
	})
	if x, _ := member(n1, "n2"); x.Addr != n2.Addr() || x.State != StateAlive {
		t.Fatalf("n1 holds n2 as %+v, want alive at %s", x, n2.Addr())
	}
	dup.Shutdown()

	// n2 crashes and comes back at once on a new port: n1 still holds the
	// old address as alive.
	old := n2.Addr()
	n2.Shutdown()
	var movedClaims chan IDConflict
	moved := startNode(t, "n2", func(c *Config) { movedClaims = claims(c) })
	if moved.Addr() == old {
		t.Skip("the OS gave the same port back")
	}
	if _, err := moved.Join([]string{n1.Addr()}); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-movedClaims:
		if c.Live || c.Theirs != old {
			t.Fatalf("a restart on a new address was told %+v, want a claim by the earlier address %s that is not live", c, old)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the restarted node saw no claim on its id: the test proved nothing")
	}
	testutil.Eventually(t, 15*time.Second, "n2 alive at its new address on n1", func() bool {
		x, _ := member(n1, "n2")
		return x.State == StateAlive && x.Addr == moved.Addr()
	})
}
