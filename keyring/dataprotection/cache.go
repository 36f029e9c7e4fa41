package dataprotection

import (
	"sync"
	"sync/atomic"
)

// maxOpened bounds the payloads one Protector remembers; when full the
// cache starts over (affinity values repeat per session, so the working set
// refills at once, and an attacker can only add values that really open).
const maxOpened = 4096

// openedCache remembers payloads that opened and their plaintext. A hit is
// still checked against the current ring: a key revoked or gone since makes
// it a miss, so the full path decides (and refuses). The payload is
// authenticated, so the same bytes under the same purposes and key always
// open to the same plaintext.
type openedCache struct {
	m atomic.Pointer[openedMap]
}

type openedMap struct {
	entries sync.Map // string(payload) -> openedEntry
	n       atomic.Int64
}

type openedEntry struct {
	id KeyID
	pt []byte
}

func (c *openedCache) get(r *Ring, id KeyID, data []byte) ([]byte, bool) {
	m := c.m.Load()
	if m == nil {
		return nil, false
	}
	v, ok := m.entries.Load(string(data))
	if !ok {
		return nil, false
	}
	e := v.(openedEntry)
	if k := r.cur.Load().keys[id]; e.id != id || k == nil || k.Revoked || k.enc == nil {
		return nil, false
	}
	return append([]byte(nil), e.pt...), true
}

func (c *openedCache) put(id KeyID, data, pt []byte) {
	m := c.m.Load()
	if m == nil || m.n.Load() >= maxOpened {
		fresh := new(openedMap)
		if !c.m.CompareAndSwap(m, fresh) {
			return // another put started over; this value is cached next time
		}
		m = fresh
	}
	if _, loaded := m.entries.LoadOrStore(string(data), openedEntry{id: id, pt: append([]byte(nil), pt...)}); !loaded {
		m.n.Add(1)
	}
}
