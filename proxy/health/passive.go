package health

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// DefaultReactivationPeriod is YARP's passive reactivation period.
const DefaultReactivationPeriod = 2 * time.Minute

// Passive turns proxied-request failures into local exclusions.
type Passive struct {
	// Logger receives a line each time a destination becomes excluded; set
	// it (with the cluster as an attribute) before the first Report. Nil:
	// slog.Default().
	Logger *slog.Logger

	enabled bool
	period  time.Duration
	// mu makes "was it excluded already?" and the new exclusion one step, so
	// a burst of failures logs the transition once.
	mu sync.Mutex
}

// NewPassive builds the passive policy for one cluster. A zero
// ReactivationPeriod is DefaultReactivationPeriod.
func NewPassive(cfg config.PassiveHealthCheck) *Passive {
	return &Passive{enabled: cfg.Enabled, period: orDuration(cfg.ReactivationPeriod.Duration, DefaultReactivationPeriod)}
}

// Report records the result of one proxied request to d: err is the
// transport error (nil on a response), status the response status.
//
// A transport error (tether's own backend timeout included: err is
// context.DeadlineExceeded or a net timeout) or a 5xx status excludes d on
// this node until now plus the reactivation period; a later failure extends
// it. context.Canceled (the client went away) is not the destination's
// fault and is ignored. Successes do not end an exclusion early. Nothing
// happens when passive checks are disabled.
func (p *Passive) Report(d *upstream.Destination, now time.Time, err error, status int) {
	if !p.enabled || d == nil {
		return
	}
	if err != nil && errors.Is(err, context.Canceled) {
		return
	}
	if err == nil && (status < 500 || status > 599) {
		return
	}
	p.mu.Lock()
	already := d.PassiveFailed(now)
	until := now.Add(p.period)
	if !d.PassiveFailed(until) { // never shorten a later exclusion
		d.MarkPassiveFailure(until)
	}
	p.mu.Unlock()
	if already {
		return
	}
	logger := p.Logger
	if logger == nil {
		logger = slog.Default()
	}
	attrs := []any{"destination", d.ID, "until", until}
	if err != nil {
		attrs = append(attrs, "error", err.Error())
	} else {
		attrs = append(attrs, "status", status)
	}
	logger.Info("destination excluded by passive health check", attrs...)
}
