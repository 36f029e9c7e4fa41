package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxConfigHistory is how many versions of the cluster's config the FSM
// keeps (oldest forgotten first); the newest is the current one.
const maxConfigHistory = 50

// ErrConfigVersion refuses a SetConfig whose IfVersion is not the current
// version (412 at the admin API).
var ErrConfigVersion = errors.New("store: config version precondition failed")

// ConfigVersion is one committed version of the cluster's config: the
// ReverseProxy section (JSON) with when and at which index it was
// committed and what it changed.
type ConfigVersion struct {
	Version uint64    `json:"version"`
	Time    time.Time `json:"time"`
	Summary string    `json:"summary"`
	Content []byte    `json:"-"`
	Index   uint64    `json:"index"`
}

// wireConfigVersion is a ConfigVersion in snapshots and backups.
type wireConfigVersion struct {
	Version uint64          `json:"version"`
	Time    time.Time       `json:"time"`
	Summary string          `json:"summary"`
	Content json.RawMessage `json:"content"`
	Index   uint64          `json:"index"`
}

// applyConfig applies a SetConfig at index; f.mu is held. Deterministic:
// the version is the current one plus one.
func (f *fsm) applyConfig(c SetConfig, index uint64) (bool, error) {
	cur := f.configVersion()
	if c.IfVersion != 0 && c.IfVersion != cur {
		return false, fmt.Errorf("%w: config version is %d, not %d", ErrConfigVersion, cur, c.IfVersion)
	}
	if len(f.config) >= maxConfigHistory {
		f.config = slices.Delete(f.config, 0, len(f.config)-maxConfigHistory+1)
	}
	f.config = append(f.config, ConfigVersion{Version: cur + 1, Time: c.At, Summary: c.Summary, Content: bytes.Clone(c.Content), Index: index})
	return true, nil
}

// configVersion is the current version (0: none committed); f.mu is held.
func (f *fsm) configVersion() uint64 {
	if len(f.config) == 0 {
		return 0
	}
	return f.config[len(f.config)-1].Version
}

func (f *fsm) configWire() []wireConfigVersion {
	if len(f.config) == 0 {
		return nil
	}
	out := make([]wireConfigVersion, 0, len(f.config))
	for _, v := range f.config {
		out = append(out, wireConfigVersion{v.Version, v.Time, v.Summary, json.RawMessage(v.Content), v.Index})
	}
	return out
}

// checkConfigWire checks a snapshot's config history and keeps its newest
// maxConfigHistory versions.
func checkConfigWire(l []wireConfigVersion) ([]wireConfigVersion, error) {
	for i, v := range l {
		if v.Version == 0 || (i > 0 && v.Version <= l[i-1].Version) {
			return nil, fmt.Errorf("store: snapshot: config version %d out of order", v.Version)
		}
		if c := bytes.TrimSpace(v.Content); len(c) == 0 || c[0] != '{' {
			return nil, fmt.Errorf("store: snapshot: config version %d is not a JSON object", v.Version)
		}
	}
	if len(l) > maxConfigHistory {
		l = l[len(l)-maxConfigHistory:]
	}
	return l, nil
}

func (f *fsm) restoreConfig(l []wireConfigVersion) {
	f.config = make([]ConfigVersion, 0, len(l))
	for _, v := range l {
		f.config = append(f.config, ConfigVersion{v.Version, v.Time, v.Summary, bytes.Clone(v.Content), v.Index})
	}
}

func (f *fsm) configDump() string {
	var b strings.Builder
	for _, v := range f.config {
		h := sha256.Sum256(v.Content)
		fmt.Fprintf(&b, "config %d at %s index %d %q content %s\n", v.Version, v.Time.Format(time.RFC3339Nano), v.Index, v.Summary, hex.EncodeToString(h[:8]))
	}
	return b.String()
}

// ConfigCurrent is the cluster's current config version (Version 0: none
// committed: every node serves its own file's ReverseProxy section).
func (s *Store) ConfigCurrent() ConfigVersion {
	f := s.fsm
	f.mu.RLock()
	defer f.mu.RUnlock()
	if len(f.config) == 0 {
		return ConfigVersion{}
	}
	v := f.config[len(f.config)-1]
	v.Content = bytes.Clone(v.Content)
	return v
}

// ConfigHistory lists the kept versions of the cluster's config, newest
// first (at most 50).
func (s *Store) ConfigHistory() []ConfigVersion {
	f := s.fsm
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]ConfigVersion, 0, len(f.config))
	for i := len(f.config) - 1; i >= 0; i-- {
		v := f.config[i]
		v.Content = bytes.Clone(v.Content)
		out = append(out, v)
	}
	return out
}

// ConfigAt is version n of the cluster's config, if it is kept.
func (s *Store) ConfigAt(n uint64) (ConfigVersion, bool) {
	for _, v := range s.ConfigHistory() {
		if v.Version == n {
			return v, true
		}
	}
	return ConfigVersion{}, false
}

// configValue is what a SetConfig answers a client with: the version it
// committed (a retry answers with the first try's).
func configValue(version uint64) string { return strconv.FormatUint(version, 10) }
