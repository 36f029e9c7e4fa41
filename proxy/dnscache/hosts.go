package dnscache

import (
	"bytes"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// parseHosts parses hosts(5) content: "address name [aliases...]" per line,
// '#' starts a comment. Lines whose address does not parse are skipped, names
// are lowercased without a trailing dot, and an address is listed once per
// name in file order.
func parseHosts(data []byte) map[string][]netip.Addr {
	m := make(map[string][]netip.Addr)
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if i := bytes.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(string(line))
		if len(f) < 2 {
			continue
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil {
			continue
		}
		a = a.Unmap()
	names:
		for _, n := range f[1:] {
			n = strings.ToLower(strings.TrimRight(n, "."))
			if n == "" {
				continue
			}
			for _, have := range m[n] {
				if have == a {
					continue names
				}
			}
			m[n] = append(m[n], a)
		}
	}
	return m
}

// hostsEntry is one name of the hosts file with its round-robin counter.
type hostsEntry struct {
	addrs []netip.Addr
	next  atomic.Uint32
}

// hostsTable holds the parsed hosts file and re-reads it when it changes.
type hostsTable struct {
	path  string
	every time.Duration

	mu      sync.Mutex
	checked time.Time // last stat, by the resolver's clock
	mtime   time.Time
	size    int64
	names   map[string]*hostsEntry
}

// lookup returns the hosts-file entry for a normalised name, or nil.
func (h *hostsTable) lookup(name string, now time.Time) *hostsEntry {
	if h.path == "" {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.names == nil || now.Sub(h.checked) >= h.every || now.Before(h.checked) {
		h.checked = now
		h.reload()
	}
	return h.names[name]
}

// reload re-parses the file if its mtime or size changed. A missing or
// unreadable file means no entries.
func (h *hostsTable) reload() {
	st, err := os.Stat(h.path)
	if err != nil {
		h.names, h.mtime, h.size = map[string]*hostsEntry{}, time.Time{}, 0
		return
	}
	if h.names != nil && st.ModTime().Equal(h.mtime) && st.Size() == h.size {
		return
	}
	data, err := os.ReadFile(h.path)
	if err != nil {
		h.names = map[string]*hostsEntry{}
		return
	}
	names := make(map[string]*hostsEntry)
	for n, addrs := range parseHosts(data) {
		names[n] = &hostsEntry{addrs: addrs}
	}
	h.names, h.mtime, h.size = names, st.ModTime(), st.Size()
}
