package logging

import (
	"log/slog"
	"maps"
	"sync"
	"time"
)

// Refusals counts what a listener refused, by reason, and logs a refusal
// at most once per reason per window, the next line saying how many were
// held back: connections churned by someone without the secret cost a
// counter, not a log line each.
type Refusals struct {
	log    *slog.Logger
	msg    string
	every  time.Duration
	limit  *Repeats
	mu     sync.Mutex
	counts map[string]uint64
}

// NewRefusals returns counts whose lines are msg at warn level on log.
func NewRefusals(log *slog.Logger, msg string, every time.Duration, now func() time.Time) *Refusals {
	return &Refusals{log: log, msg: msg, every: every, limit: NewRepeats(every, now), counts: map[string]uint64{}}
}

// Note counts a refusal for reason and logs it unless one with that reason
// was logged within the window.
func (r *Refusals) Note(reason, remote string, err error) {
	r.mu.Lock()
	r.counts[reason]++
	r.mu.Unlock()
	held, ok := r.limit.Allow(reason)
	if !ok {
		return
	}
	attrs := []any{"reason", reason, "remote", remote, "err", err}
	if held > 0 {
		attrs = append(attrs, "repeated", held, "repeated_within", r.every)
	}
	r.log.Warn(r.msg, attrs...)
}

// Counts is how many refusals were noted, by reason.
func (r *Refusals) Counts() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.counts)
}
