package store_test

import (
	"context"
	"log"
	"time"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/store"
)

// A single node forms its own cluster, waits to lead, and commits a key
// the leader generated. (Clustered nodes Bootstrap with the full server
// list once, or wait for a leader to AddVoter them.)
func Example() {
	ring := keyring.NewRing(keyring.Options{})
	s, err := store.Open(store.Config{
		NodeID:   "node1",
		Dir:      "/var/lib/tether/raft",
		BindAddr: "10.0.0.1:7000", // or ":7000" with Advertise "node1.example"
		Secret:   []byte("contents of --cluster-secret-file"),
		Ring:     ring,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Shutdown()
	if !s.HadState() {
		if err := s.Bootstrap(nil); err != nil {
			log.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitForLeader(ctx); err != nil {
		log.Fatal(err)
	}
	key, _ := keyring.GenerateKey(time.Now(), 0, keyring.DefaultLifetime)
	if _, err := s.Apply(store.InstallKey{Key: key}); err != nil {
		log.Fatal(err) // store.ErrNotLeader: forward to s.Leader()
	}
	// The data path reads ring directly; it never waits on Raft.
	_ = ring.ActiveKeyID(time.Now())
}
