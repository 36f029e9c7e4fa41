package dataprotection

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	DefaultRefresh     = 5 * time.Minute
	DefaultMissRefresh = 10 * time.Second
)

// Options tune a Ring. Zero values take the defaults.
type Options struct {
	// Certificates decrypt keys that ASP.NET encrypted with
	// ProtectKeysWithCertificate; unencrypted keys need none.
	Certificates []*Certificate
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Rand feeds the key modifiers and IVs of Protect; nil: crypto/rand.
	Rand io.Reader
	// Refresh: Protect, DefaultKey and Unprotect re-read the directory in
	// the background when the last read is older than this (ASP.NET fleets add keys ahead of
	// their activation, so a few minutes is plenty). Default 5m.
	Refresh time.Duration
	// MissRefresh: an Unprotect of an unknown key re-reads the directory
	// first unless it was read less than this long ago. Default 10s, which
	// also bounds what a client sending made-up key ids can cost.
	MissRefresh time.Duration
}

// Ring is an ASP.NET Data Protection key ring read from a directory of XML
// key files (FileSystemXmlRepository's layout: every *.xml file in it is a
// <key> or a <revocation>). It never writes: the YARP fleet keeps creating
// and rotating the keys, and the ring re-reads the directory to see them.
// Safe for concurrent use.
type Ring struct {
	dir  string
	opts Options
	now  func() time.Time
	rand io.Reader

	cur      atomic.Pointer[snapshot]
	mu       sync.Mutex // serialises reads of the directory
	lastRead atomic.Int64
	loading  atomic.Bool
	lastErr  atomic.Pointer[error]
}

// snapshot is one read of the directory.
type snapshot struct {
	keys     map[KeyID]*Key
	sorted   []*Key // by activation, then id
	warnings []string
}

// Open reads the key ring in dir. It fails when dir cannot be read, a
// revocation cannot be read, two files hold the same key, or no key can be
// used (none at all, most likely the wrong directory, or none readable,
// say for want of its certificate); other unreadable or unusable keys are
// reported by Warnings and by Key.Err. A re-read that fails the same way
// keeps the keys of the last good read.
func Open(dir string, opts Options) (*Ring, error) {
	r := &Ring{dir: dir, opts: opts, now: opts.Now, rand: opts.Rand}
	if r.now == nil {
		r.now = time.Now
	}
	if r.rand == nil {
		r.rand = rand.Reader
	}
	if r.opts.Refresh <= 0 {
		r.opts.Refresh = DefaultRefresh
	}
	if r.opts.MissRefresh <= 0 {
		r.opts.MissRefresh = DefaultMissRefresh
	}
	s, err := readDir(dir, opts.Certificates)
	if err != nil {
		return nil, err
	}
	if err := s.usable(dir); err != nil {
		return nil, err
	}
	r.cur.Store(s)
	r.lastRead.Store(r.now().UnixNano())
	return r, nil
}

// Reload re-reads the directory now. On error the ring keeps its keys.
func (r *Ring) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloadLocked()
}

func (r *Ring) reloadLocked() error {
	r.lastRead.Store(r.now().UnixNano())
	s, err := readDir(r.dir, r.opts.Certificates)
	if err == nil {
		err = s.usable(r.dir)
	}
	if err != nil {
		r.lastErr.Store(&err)
		return err
	}
	r.lastErr.Store(nil)
	r.cur.Store(s)
	return nil
}

// Err is the error of the last re-read, nil when it succeeded.
func (r *Ring) Err() error {
	if p := r.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Keys are the ring's keys by activation date.
func (r *Ring) Keys() []*Key { return append([]*Key(nil), r.cur.Load().sorted...) }

// Warnings name the files and keys the last read skipped or cannot use.
func (r *Ring) Warnings() []string { return append([]string(nil), r.cur.Load().warnings...) }

// DefaultKey is the key Protect uses now, nil when there is none: the
// usable, unrevoked, unexpired key with the latest activation date not
// after now (ASP.NET's preferred default key; ties: the smaller id). Like
// Protect, it re-reads a stale ring (see defaultKey).
func (r *Ring) DefaultKey() *Key { return r.defaultKey() }

func (s *snapshot) defaultKey(now time.Time) *Key {
	for i := len(s.sorted) - 1; i >= 0; i-- {
		k := s.sorted[i]
		if k.Activated.After(now) || k.Revoked || k.enc == nil || !k.Expires.After(now) {
			continue
		}
		return k
	}
	return nil
}

// defaultKey is DefaultKey for Protect: a stale ring is re-read in the
// background, and a ring without a default key re-read at once (at most
// once per MissRefresh), since the fleet may just have added one.
func (r *Ring) defaultKey() *Key {
	now := r.now()
	since := now.Sub(time.Unix(0, r.lastRead.Load()))
	k := r.cur.Load().defaultKey(now)
	if k == nil && since >= r.opts.MissRefresh {
		r.mu.Lock()
		if now.Sub(time.Unix(0, r.lastRead.Load())) >= r.opts.MissRefresh {
			_ = r.reloadLocked()
		}
		r.mu.Unlock()
		return r.cur.Load().defaultKey(now)
	}
	r.refreshIfStale(since)
	return k
}

// refreshIfStale re-reads the directory in the background when the last
// read is older than Refresh, so revocations and new keys are seen while
// the ring is in use.
func (r *Ring) refreshIfStale(since time.Duration) {
	if since >= r.opts.Refresh && r.loading.CompareAndSwap(false, true) {
		go func() {
			defer r.loading.Store(false)
			_ = r.Reload()
		}()
	}
}

// key finds id, re-reading the directory once when it is unknown and the
// last read is older than MissRefresh.
func (r *Ring) key(id KeyID) *Key {
	since := r.now().Sub(time.Unix(0, r.lastRead.Load()))
	if k := r.cur.Load().keys[id]; k != nil {
		r.refreshIfStale(since)
		return k
	}
	if since < r.opts.MissRefresh {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := r.cur.Load().keys[id]; k != nil {
		return k
	}
	if r.now().Sub(time.Unix(0, r.lastRead.Load())) >= r.opts.MissRefresh {
		_ = r.reloadLocked()
	}
	return r.cur.Load().keys[id]
}

// usable fails when the read found no key at all (most likely the wrong
// directory) or none it can use (say, all encrypted to a certificate that
// was not given): such a ring would open nothing.
func (s *snapshot) usable(dir string) error {
	if len(s.keys) == 0 {
		return fmt.Errorf("%s: no Data Protection key found (no *.xml file with a <key>)", dir)
	}
	for _, k := range s.sorted {
		if k.enc != nil {
			return nil
		}
	}
	return fmt.Errorf("%s: none of the %d keys can be used: %v", dir, len(s.keys), s.sorted[len(s.sorted)-1].Err)
}

// readDir reads every *.xml file of dir, as FileSystemXmlRepository does.
func readDir(dir string, certs []*Certificate) (*snapshot, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	s := &snapshot{keys: map[KeyID]*Key{}}
	var revs []revocation
	for _, ent := range ents {
		if ent.IsDir() || !strings.EqualFold(filepath.Ext(ent.Name()), ".xml") {
			continue
		}
		path := filepath.Join(dir, ent.Name())
		data, err := readLimited(path)
		if err != nil {
			s.warnings = append(s.warnings, fmt.Sprintf("%s: skipped: %v", path, err))
			continue
		}
		root, err := parseXML(data)
		if err != nil {
			s.warnings = append(s.warnings, fmt.Sprintf("%s: skipped: %v", path, err))
			continue
		}
		switch root.local {
		case "key":
			k, err := parseKeyElement(root, certs)
			if err != nil {
				s.warnings = append(s.warnings, fmt.Sprintf("%s: skipped: %v", path, err))
				continue
			}
			k.File = path
			if old, dup := s.keys[k.ID]; dup {
				return nil, fmt.Errorf("key %s is in both %s and %s", k.ID, old.File, path)
			}
			if k.Err != nil {
				s.warnings = append(s.warnings, fmt.Sprintf("%s: unusable: %v", path, k.Err))
			}
			s.keys[k.ID] = k
		case "revocation":
			rv, err := parseRevocation(root)
			if err != nil {
				return nil, fmt.Errorf("%s: unreadable revocation: %w", path, err)
			}
			revs = append(revs, rv)
		default:
			s.warnings = append(s.warnings, fmt.Sprintf("%s: skipped: unknown element <%s>", path, root.local))
		}
	}
	for _, rv := range revs {
		for _, k := range s.keys {
			// ASP.NET: a mass revocation revokes keys created strictly before it.
			if rv.all && k.Created.Before(rv.date) || !rv.all && k.ID == rv.id {
				k.Revoked = true
			}
		}
	}
	for _, k := range s.keys {
		s.sorted = append(s.sorted, k)
	}
	sort.Slice(s.sorted, func(i, j int) bool {
		a, b := s.sorted[i], s.sorted[j]
		if !a.Activated.Equal(b.Activated) {
			return a.Activated.Before(b.Activated)
		}
		return bytes.Compare(a.ID[:], b.ID[:]) > 0 // ties: the smaller id sorts last and wins
	})
	return s, nil
}

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxXMLBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxXMLBytes {
		return nil, errors.New("file larger than 1 MiB")
	}
	return data, nil
}
