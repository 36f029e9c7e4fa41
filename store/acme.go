package store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// maxAcmeEntries bounds the ACME state.
const maxAcmeEntries = 1024

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
