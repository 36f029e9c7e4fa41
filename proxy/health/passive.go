package health

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// Defaults of YARP's TransportFailureRate passive policy (and tether's
// reactivation period, which config.Load fills in already).
const (
	DefaultReactivationPeriod = 2 * time.Minute
	// DefaultDetectionWindow is how far back proxied requests count.
	DefaultDetectionWindow = 60 * time.Second
	// DefaultMinRequests is how many requests the window must hold before
	// the failure rate is judged at all.
	DefaultMinRequests = 10
	// DefaultFailureRateLimit is the failure rate a destination must exceed
	// to be excluded.
	DefaultFailureRateLimit = 0.3
	// DefaultConsecutiveConnectFailures is how many connect failures in a
	// row (connection refused, reset or timed out before any byte was
	// sent) exclude a destination at once, whatever the rate window holds:
	// a dead destination with little traffic would otherwise stay in use
	// until 10 requests reached it.
	DefaultConsecutiveConnectFailures = 3
)

// connectFailure is implemented by the data path's errors of a connection
// that failed before any byte was sent (ConnectFailure reports true).
type connectFailure interface{ ConnectFailure() bool }

// IsConnectFailure reports whether err (or an error it wraps) is a
// connection that failed before any byte was sent.
// It walks the chain by hand: errors.As allocates, and Report is on every
// request's path.
func IsConnectFailure(err error) bool {
	for err != nil {
		if cf, ok := err.(connectFailure); ok {
			return cf.ConnectFailure()
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if IsConnectFailure(e) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// RateLimitMetadataKey is YARP's cluster metadata key for the failure rate
// limit (a number in (0,1]; 1 never excludes).
const RateLimitMetadataKey = "TransportFailureRateHealthPolicy.RateLimit"

// windowBuckets is how many buckets the detection window is cut into: the
// window slides by a tenth of its size, and counts cost a fixed array.
const windowBuckets = 10

// PassiveOptions tune the passive policy; zero fields take YARP's defaults.
type PassiveOptions struct {
	// Metadata is the cluster's metadata: RateLimitMetadataKey (matched
	// case-insensitively) overrides DefaultFailureRateLimit. A value that is
	// not a number in (0,1] is logged and ignored.
	Metadata map[string]string
	// Window is the detection window; zero: DefaultDetectionWindow. It
	// slides in tenths: a request older than Window never counts, one
	// older than 9/10 of it may already have dropped out.
	Window time.Duration
	// MinRequests is the least number of requests in the window for the
	// rate to count; zero: DefaultMinRequests.
	MinRequests int
	// ConsecutiveConnectFailures is how many connect failures in a row
	// (IsConnectFailure) exclude a destination; zero:
	// DefaultConsecutiveConnectFailures.
	ConsecutiveConnectFailures int
	// Logger receives exclusions and metadata warnings; it becomes
	// Passive.Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// Passive is YARP's TransportFailureRate policy: it excludes a destination
// whose recent proxied requests fail too often.
type Passive struct {
	// Logger receives a line each time a destination becomes excluded; set
	// it (with the cluster as an attribute) before the first Report. Nil:
	// slog.Default().
	Logger *slog.Logger

	enabled     bool
	period      time.Duration
	bucketWidth int64 // nanoseconds
	minRequests int64
	rateLimit   float64
	connectRun  int
}

// NewPassive builds the passive policy for one cluster with YARP's
// defaults. A zero ReactivationPeriod is DefaultReactivationPeriod.
func NewPassive(cfg config.PassiveHealthCheck) *Passive {
	return NewPassiveWithOptions(cfg, PassiveOptions{})
}

// NewPassiveWithOptions builds the passive policy for one cluster.
func NewPassiveWithOptions(cfg config.PassiveHealthCheck, opts PassiveOptions) *Passive {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	window := orDuration(opts.Window, DefaultDetectionWindow)
	return &Passive{
		Logger:      opts.Logger,
		enabled:     cfg.Enabled,
		period:      orDuration(cfg.ReactivationPeriod.Duration, DefaultReactivationPeriod),
		bucketWidth: max(int64(window/windowBuckets), 1),
		minRequests: int64(orInt(opts.MinRequests, DefaultMinRequests)),
		connectRun:  orInt(opts.ConsecutiveConnectFailures, DefaultConsecutiveConnectFailures),
		rateLimit:   rateLimit(opts.Metadata, logger),
	}
}

// Report records the result of one proxied request to d: err is the
// transport error (nil on a response), status the response status.
//
// A failure is a transport error (tether's own backend timeout included:
// err is context.DeadlineExceeded or a net timeout) or a 5xx status; any
// other response (4xx included) is a success. context.Canceled (the client
// went away) is not the destination's doing and does not count at all.
// When the detection window holds at least MinRequests requests and
// failures/requests exceeds the rate limit, d is excluded on this node
// until now plus the reactivation period (never shortening a later
// exclusion) and its window starts afresh. Independently of the window,
// ConsecutiveConnectFailures connect failures in a row (IsConnectFailure;
// any other result breaks the run) exclude d the same way. Successes do not
// end an exclusion early. Nothing happens when passive checks are disabled.
//
// Report is on every request's path: it takes one small per-destination
// lock and allocates nothing unless it excludes.
func (p *Passive) Report(d *upstream.Destination, now time.Time, err error, status int) {
	if !p.enabled || d == nil {
		return
	}
	if err != nil && errors.Is(err, context.Canceled) {
		return
	}
	failed := err != nil || (status >= 500 && status <= 599)
	w := p.window(d)

	w.mu.Lock()
	total, failures := w.add(now.UnixNano(), p.bucketWidth, failed)
	exclude := total >= p.minRequests && float64(failures)/float64(total) > p.rateLimit
	if IsConnectFailure(err) {
		w.connectFails++
	} else {
		w.connectFails = 0
	}
	connects := w.connectFails
	if connects >= p.connectRun {
		exclude = true
	}
	var already bool
	var until time.Time
	if exclude {
		already = d.PassiveFailed(now)
		until = now.Add(p.period)
		if !d.PassiveFailed(until) { // never shorten a later exclusion
			d.MarkPassiveFailure(until)
		}
		w.clear()
		w.connectFails = 0
	}
	w.mu.Unlock()

	if !exclude || already {
		return
	}
	logger := p.Logger
	if logger == nil {
		logger = slog.Default()
	}
	attrs := []any{"destination", d.ID, "until", until, "failures", failures, "requests", total, "rate_limit", p.rateLimit}
	if connects >= p.connectRun {
		attrs = append(attrs, "consecutive_connect_failures", connects)
	}
	if err != nil {
		attrs = append(attrs, "error", err.Error())
	} else {
		attrs = append(attrs, "status", status)
	}
	logger.Warn("destination excluded by passive health check", attrs...)
}

// window is d's failure window. It is kept with the destination, so it
// survives a reload that keeps the destination and goes away with it.
func (p *Passive) window(d *upstream.Destination) *window {
	return d.PassiveState(func() any { return new(window) }).(*window)
}

// window counts one destination's requests and failures in windowBuckets
// buckets of one bucket width each. The last bucket is the one being
// filled, so the counts cover between 9 and 10 bucket widths back.
type window struct {
	mu sync.Mutex
	// width is the bucket width the counts were taken with; a policy with
	// another width (a reload that changed the window) starts afresh.
	width int64
	// newest is the index (time / width) of the newest bucket seen.
	newest  int64
	buckets [windowBuckets]bucket
	// connectFails is the current run of connect failures.
	connectFails int
}

type bucket struct {
	index           int64
	total, failures int64
}

// add counts one request at unix-nanosecond time t and returns the window's
// totals. A request older than the window (reported late) is not counted.
func (w *window) add(t, width int64, failed bool) (total, failures int64) {
	if w.width != width {
		w.clear()
		w.width = width
		w.newest = 0
	}
	idx := max(t, 0) / width
	w.newest = max(w.newest, idx)
	oldest := w.newest - windowBuckets + 1
	if idx >= oldest {
		b := &w.buckets[idx%windowBuckets]
		if b.index != idx { // a stale bucket from a past lap
			*b = bucket{index: idx}
		}
		b.total++
		if failed {
			b.failures++
		}
	}
	for i := range w.buckets {
		if b := &w.buckets[i]; b.index >= oldest {
			total += b.total
			failures += b.failures
		}
	}
	return total, failures
}

func (w *window) clear() { w.buckets = [windowBuckets]bucket{} }

// rateLimit is YARP's metadata value when valid, else the default.
func rateLimit(metadata map[string]string, logger *slog.Logger) float64 {
	for k, v := range metadata {
		if !strings.EqualFold(k, RateLimitMetadataKey) {
			continue
		}
		r, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err == nil && r > 0 && r <= 1 && !math.IsNaN(r) {
			return r
		}
		logger.Warn("invalid cluster metadata, want a number in (0,1]; using the default", "key", k, "value", v, "default", DefaultFailureRateLimit)
	}
	return DefaultFailureRateLimit
}
