package store

import (
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tether-proxy/tether/keyring"
)

// The cluster secret's rotation in the replicated state (Consul's gossip
// keyring install/use/remove, carried by Raft). The FSM keeps one record per
// secret the cluster holds: its state (primary or installed) and, for a
// secret installed through the log, the secret wrapped under the one that
// was primary then (keyring.InfoSecretWrap). A node that holds the wrapping
// secret learns the new one from the record, whether it applies the entry
// from the log or a snapshot, so a node that was down during the change
// catches up like any other state. Removing a secret drops its record and
// every wrapped copy made under it: from then on nothing in the state opens
// with it. The FSM itself only stores; after each change it hands the
// records to the node's keyring.Secrets (Sync), which opens what it can
// with the secrets it holds.

// maxSecretRemovals is how many removed secret ids the state remembers.
const maxSecretRemovals = 16

// Errors of ClusterSecret commands.
var (
	// ErrUnknownSecret: use or remove of a secret the cluster does not hold.
	ErrUnknownSecret = errors.New("store: the cluster holds no such secret")
	// ErrSecretInUse: remove of the primary secret.
	ErrSecretInUse = errors.New("store: the secret is the cluster's primary")
	// ErrTooManySecrets: install past keyring.MaxSecrets.
	ErrTooManySecrets = errors.New("store: too many cluster secrets installed")
)

// SecretRecord is the cluster's record of one secret (Store.Secrets).
type SecretRecord struct {
	ID    string
	State keyring.SecretState // primary or installed
}

// secretRec is the FSM's record of one secret (and its snapshot form).
type secretRec struct {
	ID      string              `json:"id"`
	State   keyring.SecretState `json:"state"`
	Wrapped []byte              `json:"wrapped,omitempty"`
	Under   string              `json:"under,omitempty"`
}

// applySecret applies a ClusterSecret at log index; f.mu is held.
// Deterministic: it only edits the records.
func (f *fsm) applySecret(c ClusterSecret, index uint64) (bool, error) {
	find := func(id string) int {
		return slices.IndexFunc(f.secretRecs, func(r secretRec) bool { return r.ID == id })
	}
	switch c.Op {
	case SecretInstall:
		if find(c.ID) >= 0 || (len(f.secretRecs) == 0 && c.ID == c.Under) {
			return false, nil
		}
		if len(f.secretRecs) == 0 {
			// The first change: the secret every node started with is
			// the primary, wrapped nowhere (each node has it from its
			// secret file).
			f.secretRecs = []secretRec{{ID: c.Under, State: keyring.SecretPrimary}}
		}
		if find(c.Under) < 0 {
			return false, fmt.Errorf("%w: secret %s is wrapped under %s, which the cluster does not hold", ErrUnknownSecret, c.ID, c.Under)
		}
		if len(f.secretRecs) >= keyring.MaxSecrets {
			return false, fmt.Errorf("%w: the cluster holds %d secrets, at most %d: remove one first", ErrTooManySecrets, len(f.secretRecs), keyring.MaxSecrets)
		}
		f.secretRecs = append(f.secretRecs, secretRec{ID: c.ID, State: keyring.SecretInstalled, Wrapped: c.Wrapped, Under: c.Under})
		f.secretsRemoved = slices.DeleteFunc(f.secretsRemoved, func(r wireRemoval) bool { return r.ID == c.ID })
		return true, nil
	case SecretUse:
		i := find(c.ID)
		if i < 0 {
			return false, fmt.Errorf("%w: secret %s is not installed", ErrUnknownSecret, c.ID)
		}
		if f.secretRecs[i].State == keyring.SecretPrimary {
			return false, nil
		}
		for j := range f.secretRecs {
			f.secretRecs[j].State = keyring.SecretInstalled
		}
		f.secretRecs[i].State = keyring.SecretPrimary
		return true, nil
	case SecretRemove:
		i := find(c.ID)
		if i < 0 {
			if slices.ContainsFunc(f.secretsRemoved, func(r wireRemoval) bool { return r.ID == c.ID }) {
				return false, nil
			}
			return false, fmt.Errorf("%w: secret %s", ErrUnknownSecret, c.ID)
		}
		if f.secretRecs[i].State == keyring.SecretPrimary {
			return false, fmt.Errorf("%w: secret %s encrypts the cluster's traffic: use another one first", ErrSecretInUse, c.ID)
		}
		f.secretRecs = slices.Delete(f.secretRecs, i, i+1)
		for j := range f.secretRecs {
			if f.secretRecs[j].Under == c.ID { // nothing opens it any more
				f.secretRecs[j].Wrapped, f.secretRecs[j].Under = nil, ""
			}
		}
		if len(f.secretsRemoved) >= maxSecretRemovals {
			f.secretsRemoved = f.secretsRemoved[1:]
		}
		f.secretsRemoved = append(f.secretsRemoved, wireRemoval{c.ID, index})
		return true, nil
	}
	return false, fmt.Errorf("store: secret operation %q not handled", c.Op)
}

// syncSecrets hands the records to the node's secrets; f.mu is held (read
// or write). The node's secrets learn and change state; the FSM's state is
// the same on every node whatever this node holds.
func (f *fsm) syncSecrets() {
	if f.sec == nil {
		return
	}
	recs := make([]keyring.SecretRecord, len(f.secretRecs))
	for i, r := range f.secretRecs {
		recs[i] = keyring.SecretRecord{ID: r.ID, State: r.State, Wrapped: r.Wrapped}
	}
	removed := make([]keyring.RemovedSecret, len(f.secretsRemoved))
	for i, r := range f.secretsRemoved {
		removed[i] = keyring.RemovedSecret{ID: r.ID, Index: r.Index}
	}
	if err := f.sec.Sync(recs, removed); err != nil {
		f.logger.Error("this node cannot follow the cluster's secret: it needs the cluster's current secret in --cluster-secret-file", "err", err)
	}
}

// secretDump describes the records for dump.
func (f *fsm) secretDump() string {
	var b strings.Builder
	for _, r := range f.secretRecs {
		fmt.Fprintf(&b, "secret %s %s under %q wrapped %s\n", r.ID, r.State, r.Under, hex.EncodeToString(r.Wrapped))
	}
	for _, r := range f.secretsRemoved {
		fmt.Fprintf(&b, "secret removed %s at %d\n", r.ID, r.Index)
	}
	return b.String()
}

// learnFromSnapshot opens the secrets a snapshot's records carry with
// those this node holds, before its keys are unwrapped (they may be
// wrapped under a secret this node only learns from the records).
func learnFromSnapshot(sec *keyring.Secrets, body *snapshotBody) {
	recs := make([]keyring.SecretRecord, len(body.Secrets))
	for i, r := range body.Secrets {
		recs[i] = keyring.SecretRecord{ID: r.ID, State: r.State, Wrapped: r.Wrapped}
	}
	sec.Learn(recs)
}

// Secrets is the cluster's record of its secrets (empty when it never
// changed its secret) and the ids it removed.
func (s *Store) Secrets() (records []SecretRecord, removed []string) {
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	for _, r := range s.fsm.secretRecs {
		records = append(records, SecretRecord{r.ID, r.State})
	}
	for _, r := range s.fsm.secretsRemoved {
		removed = append(removed, r.ID)
	}
	return records, removed
}

// HeldSecrets are the node's cluster secrets (the ones Open was given).
func (s *Store) HeldSecrets() *keyring.Secrets { return s.secrets }

// Refused is how many Raft connections this node refused, by reason
// (transport.Refused* constants).
func (s *Store) Refused() map[string]uint64 { return s.layer.Refused() }

// SetLegacyHandshake sets the policy for handshake version 1 (peers that
// offer no ALPN): allowed reports, on every such handshake, whether it is
// still accepted. Without one it is.
func (s *Store) SetLegacyHandshake(allowed func() bool) { s.layer.SetLegacyHandshake(allowed) }
