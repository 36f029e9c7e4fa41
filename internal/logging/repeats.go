package logging

import (
	"sync"
	"time"
)

// Repeats lets one line per key through per window and counts the
// rest, so the next line through can say how many were held back.
type Repeats struct {
	mu     sync.Mutex
	every  time.Duration
	now    func() time.Time
	byKey  map[string]*repeats
	pruned time.Time
}

type repeats struct {
	last time.Time // when a line last went through
	held int       // lines held back since
}

func NewRepeats(every time.Duration, now func() time.Time) *Repeats {
	return &Repeats{every: every, now: now, byKey: map[string]*repeats{}}
}

// Allow says whether a line with key goes through now, and if so how many
// lines with that key were held back since the previous one.
func (l *Repeats) Allow(key string) (held int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.pruned) > 10*l.every { // forget peers long gone
		for k, r := range l.byKey {
			if now.Sub(r.last) > 10*l.every {
				delete(l.byKey, k)
			}
		}
		l.pruned = now
	}
	r := l.byKey[key]
	if r == nil {
		l.byKey[key] = &repeats{last: now}
		return 0, true
	}
	if now.Sub(r.last) < l.every {
		r.held++
		return 0, false
	}
	held, r.held, r.last = r.held, 0, now
	return held, true
}
