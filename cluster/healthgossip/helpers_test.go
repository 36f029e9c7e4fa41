package healthgossip

import (
	"log/slog"
	"os"
	"testing"

	"github.com/tether-proxy/tether/cluster"
)

var testSecret = []byte("tether cluster test secret")

// testLogger shows gossip logs with TETHER_TEST_LOG=1.
func testLogger(id string) *slog.Logger {
	if os.Getenv("TETHER_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", id)
}

// startNode opens one in-process gossip member on a loopback port (through
// the testNet when one is installed).
func startNode(t *testing.T, id string, edit func(*cluster.Config)) *cluster.Membership {
	t.Helper()
	cfg := cluster.Config{
		NodeID:   id,
		BindAddr: "127.0.0.1:0",
		Secret:   testSecret,
		Meta:     cluster.Meta{RaftAddr: "127.0.0.1:7000", AdminAddr: "127.0.0.1:9901", Version: "test"},
		Timing:   cluster.Local,
		Logger:   testLogger(id),
	}
	if edit != nil {
		edit(&cfg)
	}
	var opts []cluster.OpenOption
	if openHook != nil {
		opts = append(opts, openHook)
	}
	m, err := cluster.Open(cfg, opts...)
	if err != nil {
		t.Fatalf("Open %s: %v", id, err)
	}
	t.Cleanup(func() { m.Shutdown() })
	return m
}

func mustJoin(t *testing.T, m, to *cluster.Membership) {
	t.Helper()
	if _, err := m.Join([]string{to.Addr()}); err != nil {
		t.Fatalf("%s joins %s: %v", m.NodeID(), to.NodeID(), err)
	}
}

// stateOf is the state m shows for member id ("unknown" when none).
func stateOf(m *cluster.Membership, id string) cluster.State {
	for _, x := range m.Members() {
		if x.ID == id {
			return x.State
		}
	}
	return "unknown"
}
