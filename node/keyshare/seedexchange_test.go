package keyshare

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/keyring/keyringtest"
)

// The exchange is authenticated as a whole: a request under another
// secret or altered is refused, and an answer opens only for the request
// it answers, from the node asked, to the node that asked.
func TestTicketSeedExchangeIsBoundToTheClusterAndToItsRequest(t *testing.T) {
	c, err := newSeedCrypto([]byte("the-test-cluster-secret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := newSeedCrypto([]byte("another-cluster-secret-0123456789"))
	seed := keyring.NewTicketSeed()
	ans := seedAnswer{From: "n2", To: "n1", Cluster: "cid-1", Leader: true, Term: 3, Complete: true, Days: []keyring.DaySeeds{{Day: 7, Seeds: []keyring.TicketSeed{seed}}}}

	ask, err := c.newRequest("n1", "n2", "cid-1")
	if err != nil {
		t.Fatal(err)
	}
	req, key, err := c.openRequest(ask.msg)
	if err != nil {
		t.Fatal(err)
	}
	out, err := key.sealAnswer(ask.msg, req, ans)
	if err != nil {
		t.Fatal(err)
	}
	var m seedAnswerMsg
	json.Unmarshal(out, &m)
	got, err := c.openAnswer(ask, m)
	if err != nil {
		t.Fatal(err)
	}
	if days := got.Days; len(days) != 1 || days[0].Day != 7 || len(days[0].Seeds) != 1 || days[0].Seeds[0] != seed {
		t.Fatal("the asker did not read the seed it was sent")
	}

	if _, _, err := foreign.openRequest(ask.msg); !errors.Is(err, errSeedAuth) {
		t.Errorf("a request under another cluster secret: %v, want %v", err, errSeedAuth)
	}
	var rm seedRequestMsg
	json.Unmarshal(ask.msg, &rm)
	rm.Body = bytes.Replace(rm.Body, []byte(`"t":"n2"`), []byte(`"t":"n3"`), 1)
	altered, _ := json.Marshal(rm)
	if _, _, err := c.openRequest(altered); !errors.Is(err, errSeedAuth) {
		t.Errorf("a request altered on the way: %v, want %v", err, errSeedAuth)
	}

	again, _ := c.newRequest("n1", "n2", "cid-1")
	if _, err := c.openAnswer(again, m); !errors.Is(err, errSeedAnswer) {
		t.Errorf("an answer to another request of the same node: %v, want %v", err, errSeedAnswer)
	}
	if _, err := foreign.openAnswer(ask, m); !errors.Is(err, errSeedAnswer) {
		t.Errorf("an answer opened under another cluster secret: %v, want %v", err, errSeedAnswer)
	}
	for _, wrong := range []seedAnswer{{From: "n3", To: "n1"}, {From: "n2", To: "n9"}, {From: "n2", To: "n1", Cluster: "cid-2"}} {
		out, _ := key.sealAnswer(ask.msg, req, wrong)
		var wm seedAnswerMsg
		json.Unmarshal(out, &wm)
		if _, err := c.openAnswer(ask, wm); !errors.Is(err, errSeedAnswer) {
			t.Errorf("an answer from %s of cluster %q to %s opened for n1's request (cluster cid-1) to n2: %v", wrong.From, wrong.Cluster, wrong.To, err)
		}
	}
	if keyringtest.ContainsSeed(out, []keyring.TicketSeed{seed}) || keyringtest.ContainsSeed(ask.msg, []keyring.TicketSeed{seed}) {
		t.Error("the exchange carries the seed in the clear")
	}
}

func FuzzSeedMessages(f *testing.F) {
	c, err := newSeedCrypto([]byte("the-test-cluster-secret-0123456789"))
	if err != nil {
		f.Fatal(err)
	}
	ask, _ := c.newRequest("n1", "n2", "cid-1")
	f.Add(ask.msg)
	plain, _ := encodeSeedAnswer(seedAnswer{From: "n2", To: "n1", Days: []keyring.DaySeeds{{Day: 7, Seeds: []keyring.TicketSeed{keyring.NewTicketSeed()}}}})
	f.Add(plain)
	f.Add([]byte{0, 0, 0, 2, '{', '}', 1, 0, 0, 0, 0, 0, 0, 0, 7, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		if req, _, err := c.openRequest(b); err == nil && (req.From == "" || len(req.Pub) != 32) {
			t.Fatalf("openRequest accepted %q", b)
		}
		if a, err := decodeSeedAnswer(b); err == nil {
			again, err := encodeSeedAnswer(a)
			if err != nil {
				t.Fatal(err)
			}
			if b2, err := decodeSeedAnswer(again); err != nil || len(b2.Days) != len(a.Days) {
				t.Fatalf("an answer decoded, encoded again, does not decode the same: %v", err)
			}
		}
	})
}

// While the cluster secret is being replaced nodes hold both: a request
// signed with either is answered, under the secret that verified it, and
// the asker opens the answer.
func TestTicketSeedExchangeAcceptsEitherSecretDuringAChange(t *testing.T) {
	oldSecret, newSecret := []byte("the-old-cluster-secret-0123456789"), []byte("the-new-cluster-secret-0123456789")
	onlyOld, _ := newSeedCrypto(oldSecret)
	both, _ := newSeedCrypto(newSecret, oldSecret)
	onlyNew, _ := newSeedCrypto(newSecret)
	seed := keyring.NewTicketSeed()
	for _, c := range []struct {
		desc            string
		asker, answerer *seedCrypto
		ok              bool
	}{
		{"a node on the old secret asks one holding both", onlyOld, both, true},
		{"a node holding both asks one on the old secret", both, onlyOld, false},
		{"a node on the new secret asks one holding both", onlyNew, both, true},
		{"a node on the old secret asks one on the new only", onlyOld, onlyNew, false},
	} {
		ask, _ := c.asker.newRequest("n1", "n2", "")
		req, key, err := c.answerer.openRequest(ask.msg)
		if (err == nil) != c.ok {
			t.Errorf("%s: request: %v, want accepted %t", c.desc, err, c.ok)
			continue
		}
		if err != nil {
			continue
		}
		out, _ := key.sealAnswer(ask.msg, req, seedAnswer{From: "n2", To: "n1", Days: []keyring.DaySeeds{{Day: 1, Seeds: []keyring.TicketSeed{seed}}}})
		var m seedAnswerMsg
		json.Unmarshal(out, &m)
		got, err := c.asker.openAnswer(ask, m)
		if err != nil || len(got.Days) != 1 || got.Days[0].Seeds[0] != seed {
			t.Errorf("%s: the asker did not open the answer: %v", c.desc, err)
		}
	}
}
