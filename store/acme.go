package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tether-proxy/tether/keyring"
)

// The ACME state is a small replicated map of named values that the
// leader's ACME manager writes and every node reads: the account, each
// certificate with its private key, the challenges being validated and
// the manager's status. The store does not interpret the values; secret
// ones (private keys) travel in the log and rest in snapshots wrapped with
// the cluster secret's key-encryption key, bound to their name.

// AcmeWrite puts entries and deletes names of the ACME state in one log
// entry. Deleting a missing name is a no-op.
type AcmeWrite struct {
	ReqID  string
	Put    []AcmeEntry
	Delete []string
}

// AcmeEntry is one named value of the ACME state. Secret values are
// wrapped with the KEK in the log and in snapshots.
type AcmeEntry struct {
	Name   string
	Secret bool
	Value  []byte
}

func (AcmeWrite) isCommand() {}

// Bounds of the ACME state: a certificate chain with its key is a few KiB.
const (
	maxAcmeValue   = 64 << 10
	maxAcmeEntries = 1024
	maxAcmeChanges = 64 // puts plus deletes in one write
)

type wireAcme struct {
	ReqID  string          `json:"req"`
	Put    []wireAcmeEntry `json:"put,omitempty"`
	Delete []string        `json:"delete,omitempty"`
}

type wireAcmeEntry struct {
	Name   string `json:"name"`
	Secret bool   `json:"secret,omitempty"`
	Value  []byte `json:"value"` // wrapped when Secret
}

// acmePurpose binds a wrapped value to its name.
func acmePurpose(name string) string { return "tether acme " + name }

func wrapAcmeEntries(kek []byte, es []AcmeEntry) ([]wireAcmeEntry, error) {
	out := make([]wireAcmeEntry, 0, len(es))
	for _, e := range es {
		v := e.Value
		if e.Secret {
			w, err := keyring.WrapBlob(kek, acmePurpose(e.Name), e.Value)
			if err != nil {
				return nil, err
			}
			v = w
		}
		out = append(out, wireAcmeEntry{e.Name, e.Secret, v})
	}
	return out, nil
}

func unwrapAcmeEntries(keks [][]byte, ws []wireAcmeEntry) ([]AcmeEntry, error) {
	out := make([]AcmeEntry, 0, len(ws))
	for _, w := range ws {
		if err := checkNames("acme entry name", w.Name); err != nil {
			return nil, err
		}
		v := w.Value
		if w.Secret {
			p, err := keyring.UnwrapBlobAny(keks, acmePurpose(w.Name), w.Value)
			if err != nil {
				return nil, fmt.Errorf("acme entry %q: %w", w.Name, err)
			}
			v = p
		}
		if len(v) > maxAcmeValue {
			return nil, fmt.Errorf("acme entry %q: %d bytes, at most %d", w.Name, len(v), maxAcmeValue)
		}
		out = append(out, AcmeEntry{w.Name, w.Secret, v})
	}
	return out, nil
}

func encodeAcme(kek []byte, c AcmeWrite) ([]byte, error) {
	put, err := wrapAcmeEntries(kek, c.Put)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(wireAcme{c.ReqID, put, c.Delete})
	if err != nil {
		return nil, err
	}
	typ := typeAcmeWrite
	if commandSpecs[typ].ignorable {
		typ |= flagIgnorable
	}
	out := append([]byte{typ, commandSpecs[typeAcmeWrite].version}, b...)
	if _, err := decodeCommand(kek, out); err != nil { // refuse to log what no node could apply
		return nil, err
	}
	return out, nil
}

func decodeAcme(keks [][]byte, ver byte, body []byte) (Command, error) {
	if ver != bodyVersion {
		return nil, fmt.Errorf("command type %d: body version %d, want %d", typeAcmeWrite, ver, bodyVersion)
	}
	var w wireAcme
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, fmt.Errorf("command type %d: %w", typeAcmeWrite, err)
	}
	if w.ReqID == "" || len(w.ReqID) > maxReqIDLen {
		return nil, fmt.Errorf("command type %d: request id of %d bytes, want 1-%d", typeAcmeWrite, len(w.ReqID), maxReqIDLen)
	}
	if n := len(w.Put) + len(w.Delete); n == 0 || n > maxAcmeChanges {
		return nil, fmt.Errorf("command type %d: %d changes, want 1-%d", typeAcmeWrite, n, maxAcmeChanges)
	}
	put, err := unwrapAcmeEntries(keks, w.Put)
	if err != nil {
		return nil, fmt.Errorf("command type %d: %w", typeAcmeWrite, err)
	}
	for _, n := range w.Delete {
		if err := checkNames("acme entry name", n); err != nil {
			return nil, fmt.Errorf("command type %d: %w", typeAcmeWrite, err)
		}
	}
	return AcmeWrite{ReqID: w.ReqID, Put: put, Delete: w.Delete}, nil
}

// errAcmeFull refuses a write that would grow the ACME state past its bound.
var errAcmeFull = errors.New("store: the ACME state is full")

// applyAcme applies an AcmeWrite; f.mu is held. Deterministic.
func (f *fsm) applyAcme(c AcmeWrite) (bool, error) {
	if f.acme == nil {
		f.acme = map[string]AcmeEntry{}
	}
	added := 0
	for _, e := range c.Put {
		if _, ok := f.acme[e.Name]; !ok {
			added++
		}
	}
	if len(f.acme)+added > maxAcmeEntries {
		return false, fmt.Errorf("%w (%d entries)", errAcmeFull, maxAcmeEntries)
	}
	changed := false
	for _, n := range c.Delete {
		if _, ok := f.acme[n]; ok {
			delete(f.acme, n)
			changed = true
		}
	}
	for _, e := range c.Put {
		e.Value = slices.Clone(e.Value)
		f.acme[e.Name] = e
		changed = true
	}
	if changed {
		f.acmeVersion++
	}
	return changed, nil
}

// acmeList is the ACME state sorted by name (snapshots, dump).
func (f *fsm) acmeList() []AcmeEntry {
	out := make([]AcmeEntry, 0, len(f.acme))
	for _, n := range slices.Sorted(maps.Keys(f.acme)) {
		out = append(out, f.acme[n])
	}
	return out
}

func (f *fsm) acmeDump() string {
	var b strings.Builder
	for _, e := range f.acmeList() {
		h := sha256.Sum256(e.Value)
		fmt.Fprintf(&b, "acme %s secret %t value %s\n", e.Name, e.Secret, hex.EncodeToString(h[:8]))
	}
	return b.String()
}

// restoreAcme installs a snapshot's ACME entries; f.mu is held.
func (f *fsm) restoreAcme(es []AcmeEntry) {
	f.acme = make(map[string]AcmeEntry, len(es))
	for _, e := range es {
		f.acme[e.Name] = e
	}
	f.acmeVersion++
}

// Acme returns the ACME entries whose names start with prefix, and the
// state's version: it changes whenever any entry does, so a reader can
// cache what it built from the entries.
func (s *Store) Acme(prefix string) (entries []AcmeEntry, version uint64) {
	f := s.fsm
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, n := range slices.Sorted(maps.Keys(f.acme)) {
		if strings.HasPrefix(n, prefix) {
			e := f.acme[n]
			e.Value = slices.Clone(e.Value)
			entries = append(entries, e)
		}
	}
	return entries, f.acmeVersion
}

// AcmeEntry returns one entry of the ACME state.
func (s *Store) AcmeEntry(name string) (AcmeEntry, bool) {
	f := s.fsm
	f.mu.RLock()
	defer f.mu.RUnlock()
	e, ok := f.acme[name]
	e.Value = slices.Clone(e.Value)
	return e, ok
}

// AcmeVersion changes whenever the ACME state does.
func (s *Store) AcmeVersion() uint64 {
	f := s.fsm
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.acmeVersion
}
