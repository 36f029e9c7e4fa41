package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

func TestPeersFileFormat(t *testing.T) {
	dir := t.TempDir()
	many := make([]string, 0, maxKnownPeers+5)
	for i := range maxKnownPeers + 5 {
		many = append(many, fmt.Sprintf("127.0.0.1:%d", 20000+i))
	}
	for _, tc := range []struct {
		name    string
		content *string // nil: no file
		want    []string
		wantErr string
	}{
		{name: "no file", content: nil, want: nil},
		{name: "peers", content: ptr(peersFileHeader + "127.0.0.1:1\n 127.0.0.1:2 \n\n"), want: []string{"127.0.0.1:1", "127.0.0.1:2"}},
		{name: "header only", content: ptr(peersFileHeader), want: nil},
		{name: "not ours", content: ptr("127.0.0.1:1\n"), wantErr: "is not a gossip peers file"},
		{name: "capped", content: ptr(peersFileHeader + strings.Join(many, "\n")), want: many[:maxKnownPeers]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if tc.content != nil {
				if err := os.WriteFile(path, []byte(*tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := readPeersFile(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("readPeersFile = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	path := filepath.Join(dir, "round-trip")
	if err := writePeersFile(path, []string{"10.0.0.1:7946", "10.0.0.2:7946"}); err != nil {
		t.Fatal(err)
	}
	if got, err := readPeersFile(path); err != nil || !slices.Equal(got, []string{"10.0.0.1:7946", "10.0.0.2:7946"}) {
		t.Fatalf("round trip = %q, %v", got, err)
	}
}

func ptr(s string) *string { return &s }

func TestPeersFileFollowsMembersAndKeepsTheLastSet(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for two members to be declared dead")
	}
	path := filepath.Join(t.TempDir(), "gossip-peers")
	n1 := startNode(t, "n1", func(c *Config) { c.PeersFile = path })
	n2 := startNode(t, "n2", nil)
	n3 := startNode(t, "n3", nil)
	mustJoin(t, n2, n1)
	mustJoin(t, n3, n1)
	file := func() string {
		got, _ := readPeersFile(path)
		return strings.Join(got, ",")
	}
	both := strings.Join(slices.Sorted(slices.Values([]string{n2.Addr(), n3.Addr()})), ",")
	testutil.Eventually(t, 5*time.Second, "n2 and n3 in n1's peers file", func() bool { return file() == both })

	n3.Shutdown()
	testutil.Eventually(t, 10*time.Second, "only n2 in the file once n3 is dead", func() bool { return file() == n2.Addr() })
	n2.Shutdown()
	testutil.Eventually(t, 10*time.Second, "n2 dead on n1", func() bool { return stateOf(n1, "n2") == StateDead })
	// Alone, n1 keeps the last peers it had: they are where it looks first.
	if file() != n2.Addr() {
		t.Fatalf("peers file = %q after every peer died, want the last set %q", file(), n2.Addr())
	}
}

func TestRestartedNodeRejoinsThroughItsKnownPeers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gossip-peers")
	n1 := startNode(t, "n1", nil)
	n2 := startNode(t, "n2", nil)
	n3 := startNode(t, "n3", func(c *Config) { c.PeersFile = path })
	mustJoin(t, n2, n1)
	mustJoin(t, n3, n1)
	testutil.Eventually(t, 5*time.Second, "3 alive on n3", func() bool { return aliveIDs(n3) == "n1,n2,n3" })
	testutil.Eventually(t, 5*time.Second, "n1 and n2 in n3's peers file", func() bool {
		got, _ := readPeersFile(path)
		return len(got) == 2
	})
	old := n3.Addr()
	n3.Shutdown() // crash
	testutil.Eventually(t, 10*time.Second, "n3 dead", func() bool {
		return stateOf(n1, "n3") == StateDead && stateOf(n2, "n3") == StateDead
	})

	// Back on a new port and without a join list: nobody can reach it, so
	// only its own rejoin brings it back.
	n3b := startNode(t, "n3", func(c *Config) { c.PeersFile = path })
	if n3b.Addr() == old {
		t.Skip("the OS gave the same port back")
	}
	want := strings.Join(slices.Sorted(slices.Values([]string{n1.Addr(), n2.Addr()})), ",")
	if got := strings.Join(n3b.KnownPeers(), ","); got != want {
		t.Fatalf("KnownPeers = %q, want %q", got, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n3b.Rejoin(ctx); err != nil {
		t.Fatal(err)
	}
	// The join's push/pull brings both peers at once, not only the one
	// that answered first; then every node holds the same view.
	testutil.Eventually(t, 2*time.Second, "n1 and n2 alive on n3 right after Rejoin", func() bool { return aliveIDs(n3b) == "n1,n2,n3" })
	for _, m := range []*Membership{n1, n2, n3b} {
		testutil.Eventually(t, 10*time.Second, "the three alive, n3 at its new address, on every node", func() bool {
			x, _ := member(m, "n3")
			return aliveIDs(m) == "n1,n2,n3" && x.Addr == n3b.Addr()
		})
	}
}

func TestRejoinWithoutKnownPeers(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"no file": "", "missing file": filepath.Join(dir, "none"), "bad file": bad} {
		m := startNode(t, "solo-"+strings.ReplaceAll(name, " ", "-"), func(c *Config) { c.PeersFile = path })
		if got := m.KnownPeers(); len(got) != 0 {
			t.Fatalf("%s: KnownPeers = %q, want none", name, got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := m.Rejoin(ctx) // returns at once: nothing to contact
		cancel()
		if err != nil {
			t.Fatalf("%s: Rejoin = %v, want nil", name, err)
		}
	}
}

func TestRejoinGivesUpWhenCtxEnds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gossip-peers")
	if err := writePeersFile(path, []string{fmt.Sprintf("127.0.0.1:%d", freePort(t))}); err != nil {
		t.Fatal(err)
	}
	m := startNode(t, "lonely", func(c *Config) { c.PeersFile = path })
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := m.Rejoin(ctx); err == nil || !strings.Contains(err.Error(), "rejoin") {
		t.Fatalf("Rejoin with no peer up = %v, want a rejoin error after ctx ends", err)
	}
}
