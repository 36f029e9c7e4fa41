package keyshare

import (
	"slices"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
)

// fakeStore is the store as the key transfer sees it.
type fakeStore struct{ leading bool }

func (s *fakeStore) IsLeader() bool            { return s.leading }
func (s *fakeStore) Leader() (id, addr string) { return "n1", "" }
func (s *fakeStore) Term() uint64              { return 1 }
func (s *fakeStore) ClusterID() string         { return "cid-1" }

// What the leader answers a key request, to this release (every key the
// asker lacks, every key id it holds) and to an earlier one (the named
// key); a node that does not lead says so.
func TestTheLeaderAnswersAKeyRequest(t *testing.T) {
	ring := keyring.NewRing(keyring.Options{})
	var keys []keyring.Key
	for range 3 {
		k, err := keyring.GenerateKey(time.Now(), 0, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := ring.Install(k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	held, k, revoked := keys[0], keys[1], keys[2]
	if err := ring.Revoke(revoked.ID); err != nil {
		t.Fatal(err)
	}
	secrets, err := keyring.NewSecrets([]byte("the-test-cluster-secret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	lead := &fakeStore{leading: true}
	kt := &Transfer{cfg: TransferConfig{NodeID: "n1", Store: lead, Ring: ring, Secrets: secrets, CaughtUp: func() bool { return true }, Log: quietLogger()}}
	have, all := []string{held.ID}, []string{}
	for _, md := range ring.List(time.Now()) {
		if md.ID != revoked.ID {
			all = append(all, md.ID)
		}
	}
	unwrap := func(b []byte) []string {
		t.Helper()
		keys, err := keyring.UnwrapKeys(secrets.KEK(keyring.InfoTransfer), b)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, k := range keys {
			ids = append(ids, k.ID)
		}
		return ids
	}
	t.Run("to this release: every key the asker lacks and every key id held", func(t *testing.T) {
		rep := kt.answer(keyRequest{From: "n2", ID: "0000000000000000", Nonce: "x", V: keyTransferVersion, Have: have})
		slices.Sort(rep.Held)
		slices.Sort(all)
		if rep.V != keyTransferVersion || rep.Behind || !slices.Equal(rep.Held, all) || !slices.Equal(rep.Revoked, []string{revoked.ID}) {
			t.Fatalf("answer v%d, behind %t, held %v, revoked %v; want v%d, held %v, revoked [%s]", rep.V, rep.Behind, rep.Held, rep.Revoked, keyTransferVersion, all, revoked.ID)
		}
		if got := unwrap(rep.Lacking); !slices.Equal(got, []string{k.ID}) {
			t.Fatalf("sent keys %v, want [%s] (the one the follower lacks)", got, k.ID)
		}
	})
	t.Run("to an earlier release: the named key only", func(t *testing.T) {
		rep := kt.answer(keyRequest{From: "n2", ID: k.ID, Nonce: "x"})
		if rep.V != 0 || rep.State != "ok" || len(rep.Lacking) != 0 || len(rep.Held) != 0 {
			t.Fatalf("answer %+v, want state ok and no version-2 fields", rep)
		}
		if got := unwrap(rep.Keys); !slices.Equal(got, []string{k.ID}) {
			t.Fatalf("sent keys %v, want [%s]", got, k.ID)
		}
		if rep := kt.answer(keyRequest{From: "n2", ID: revoked.ID, Nonce: "x"}); rep.State != "revoked" || len(rep.Keys) != 0 {
			t.Fatalf("answer about a revoked key: state %s with %d key bytes, want revoked and none", rep.State, len(rep.Keys))
		}
	})
	lead.leading = false
	if rep := kt.answer(keyRequest{From: "n2", ID: k.ID, Nonce: "x", V: keyTransferVersion}); rep.State != "not_leader" {
		t.Fatalf("a follower answered %+v, want not_leader", rep)
	}
}
