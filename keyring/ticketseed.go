package keyring

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// TicketSeedSize is the length of a day's ticket seed.
const TicketSeedSize = 32

// MaxSeedsPerDay bounds the seeds one day holds: the one that seals and
// those it replaced (a leader change that raced the day's seed), which
// still open tickets.
const MaxSeedsPerDay = 4

// TicketSeed is the random seed of one UTC day's TLS session ticket keys.
// It exists in memory only: no log, snapshot, backup or file holds it, so
// whoever holds the cluster secret and a backup (every keyring key) still
// cannot derive a ticket key. String, Format and LogValue print none of it.
type TicketSeed [TicketSeedSize]byte

// NewTicketSeed returns a fresh seed from crypto/rand.
func NewTicketSeed() TicketSeed {
	var s TicketSeed
	_, _ = rand.Read(s[:]) // crypto/rand never fails (Go 1.24+)
	return s
}

func (TicketSeed) String() string   { return "keyring.TicketSeed(<redacted>)" }
func (TicketSeed) GoString() string { return "keyring.TicketSeed(<redacted>)" }

// Format makes every fmt verb print the redacted form.
func (s TicketSeed) Format(f fmt.State, _ rune) { fmt.Fprint(f, s.String()) }

func (TicketSeed) LogValue() slog.Value { return slog.StringValue("<redacted>") }

// DaySeeds are the seeds held for one UTC day (counted from the Unix
// epoch, TicketDay): the first seals that day's tickets, each opens them.
type DaySeeds struct {
	Day   int64
	Seeds []TicketSeed
}

// TicketSeeds holds the ticket seeds of the days whose tickets a node may
// seal or open, in memory only. A cluster's leader makes them and every
// member takes them from it; Ring.TicketKeysWith derives the ticket keys.
// Safe for concurrent use.
type TicketSeeds struct {
	mu   sync.RWMutex
	days map[int64][]*TicketSeed
	// gen changes (under mu) with every change, so a derivation cached
	// for one set of seeds is not used for another.
	gen atomic.Uint64
}

// NewTicketSeeds returns an empty set.
func NewTicketSeeds() *TicketSeeds { return &TicketSeeds{days: map[int64][]*TicketSeed{}} }

// Generate gives day a fresh random seed unless it holds one already, and
// reports whether it did.
func (s *TicketSeeds) Generate(day int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.days[day]) > 0 {
		return false
	}
	seed := NewTicketSeed()
	s.days[day] = []*TicketSeed{&seed}
	s.gen.Add(1)
	return true
}

// Adopt takes the seeds of the given days as authoritative (the leader's):
// for each day its first seed seals from now on, and the day's seeds held
// before stay to open the tickets sealed under them, up to
// MaxSeedsPerDay. Days absent from days are left as they are.
func (s *TicketSeeds) Adopt(days []DaySeeds) { s.merge(days, true) }

// Fill takes the seeds of the given days for the days that hold none.
func (s *TicketSeeds) Fill(days []DaySeeds) { s.merge(days, false) }

func (s *TicketSeeds) merge(days []DaySeeds, authoritative bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for _, d := range days {
		held := s.days[d.Day]
		if len(held) > 0 && !authoritative {
			continue
		}
		var list []*TicketSeed
		add := func(seed TicketSeed) {
			if seed == (TicketSeed{}) || len(list) >= MaxSeedsPerDay || slices.ContainsFunc(list, func(p *TicketSeed) bool { return *p == seed }) {
				return
			}
			p := new(TicketSeed)
			*p = seed
			list = append(list, p)
		}
		for _, seed := range d.Seeds {
			add(seed)
		}
		if len(list) == 0 {
			continue
		}
		for _, p := range held {
			add(*p)
		}
		if !slices.EqualFunc(list, held, func(a, b *TicketSeed) bool { return *a == *b }) {
			changed = true
		}
		for _, p := range held {
			clear(p[:])
		}
		s.days[d.Day] = list
	}
	if changed {
		s.gen.Add(1)
	}
}

// Has reports whether day holds a seed.
func (s *TicketSeeds) Has(day int64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.days[day]) > 0
}

// Days returns a copy of every day's seeds, the earliest day first. The
// caller clears the copies when done with them.
func (s *TicketSeeds) Days() []DaySeeds {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]DaySeeds, 0, len(s.days))
	for _, day := range slices.Sorted(maps.Keys(s.days)) {
		d := DaySeeds{Day: day}
		for _, p := range s.days[day] {
			d.Seeds = append(d.Seeds, *p)
		}
		out = append(out, d)
	}
	return out
}

// Prune erases (overwrites with zeros, then forgets) the seeds of the days
// outside today's window: the seven days whose tickets open (today and the
// six before) and tomorrow, whose seed the leader hands out ahead. A
// ticket sealed under an erased seed opens nowhere any more.
func (s *TicketSeeds) Prune(today int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for day, list := range s.days {
		if day > today-ticketDays && day <= today+1 {
			continue
		}
		for _, p := range list {
			clear(p[:])
		}
		delete(s.days, day)
		s.gen.Add(1)
	}
}

// Clear erases every seed.
func (s *TicketSeeds) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for day, list := range s.days {
		for _, p := range list {
			clear(p[:])
		}
		delete(s.days, day)
	}
	s.gen.Add(1)
}

// sealing is the seed that seals day's tickets (nil: none held). The
// caller holds s.mu for reading.
func (s *TicketSeeds) sealing(day int64) *TicketSeed {
	if list := s.days[day]; len(list) > 0 {
		return list[0]
	}
	return nil
}

// Equal reports whether two days' seeds are the same, in the same order.
func (d DaySeeds) Equal(o DaySeeds) bool {
	return d.Day == o.Day && slices.EqualFunc(d.Seeds, o.Seeds, func(a, b TicketSeed) bool { return a == b })
}
