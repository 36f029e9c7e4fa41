package health

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// timeoutErr is a net.Error timeout, as the transport returns on a dial or
// read deadline.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var _ net.Error = timeoutErr{}

func passiveCfg(enabled bool, period time.Duration) config.PassiveHealthCheck {
	return config.PassiveHealthCheck{Enabled: enabled, ReactivationPeriod: config.Duration{Duration: period}}
}

func TestPassiveReport(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		desc         string
		cfg          config.PassiveHealthCheck
		err          error
		status       int
		wantExcluded bool
	}{
		{"5xx excludes", passiveCfg(true, time.Minute), nil, 500, true},
		{"503 excludes", passiveCfg(true, time.Minute), nil, 503, true},
		{"4xx does not exclude", passiveCfg(true, time.Minute), nil, 404, false},
		{"2xx does not exclude", passiveCfg(true, time.Minute), nil, 200, false},
		{"transport error excludes", passiveCfg(true, time.Minute), errors.New("connection refused"), 502, true},
		{"transport error without a status excludes", passiveCfg(true, time.Minute), errors.New("connection reset"), 0, true},
		{"tether's own timeout (504, DeadlineExceeded) excludes", passiveCfg(true, time.Minute), context.DeadlineExceeded, 504, true},
		{"a net timeout excludes", passiveCfg(true, time.Minute), timeoutErr{}, 504, true},
		{"client cancellation is not the destination's fault", passiveCfg(true, time.Minute), context.Canceled, 502, false},
		{"disabled does nothing", passiveCfg(false, time.Minute), nil, 500, false},
		{"disabled ignores transport errors too", passiveCfg(false, time.Minute), errors.New("refused"), 502, false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			d := upstream.NewDestination("d1", nil, nil, "", nil)
			p := NewPassive(tt.cfg)
			p.Logger = discardLogger()
			p.Report(d, t0, tt.err, tt.status)
			if got := d.PassiveFailed(t0); got != tt.wantExcluded {
				t.Fatalf("PassiveFailed = %v, want %v", got, tt.wantExcluded)
			}
			if got := d.AcceptsNew(t0); got == tt.wantExcluded {
				t.Fatalf("AcceptsNew = %v, want %v", got, !tt.wantExcluded)
			}
		})
	}
}

func TestPassiveReactivation(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		desc   string
		period time.Duration
		// failures are offsets from t0 at which a 500 is reported.
		failures     []time.Duration
		at           time.Duration
		wantExcluded bool
	}{
		{"excluded just before the period ends", time.Minute, []time.Duration{0}, time.Minute - time.Nanosecond, true},
		{"reactivated once the period has passed", time.Minute, []time.Duration{0}, time.Minute, false},
		{"default period is 2m", 0, []time.Duration{0}, 2*time.Minute - time.Second, true},
		{"default period ends after 2m", 0, []time.Duration{0}, 2 * time.Minute, false},
		{"a later failure extends the exclusion", time.Minute, []time.Duration{0, 30 * time.Second}, 80 * time.Second, true},
		{"an out-of-order earlier report does not shorten it", time.Minute, []time.Duration{30 * time.Second, 0}, 80 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			d := upstream.NewDestination("d1", nil, nil, "", nil)
			p := NewPassive(passiveCfg(true, tt.period))
			p.Logger = discardLogger()
			for _, off := range tt.failures {
				p.Report(d, t0.Add(off), nil, 500)
			}
			if got := d.PassiveFailed(t0.Add(tt.at)); got != tt.wantExcluded {
				t.Fatalf("PassiveFailed(t0+%v) = %v, want %v", tt.at, got, tt.wantExcluded)
			}
		})
	}
}

func TestPassiveLogsOnlyTheTransitionToExcluded(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	d := upstream.NewDestination("d1", nil, nil, "", nil)
	p := NewPassive(passiveCfg(true, time.Minute))
	p.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	p.Report(d, t0, nil, 500)
	p.Report(d, t0.Add(time.Second), errors.New("refused"), 502)
	p.Report(d, t0.Add(2*time.Second), nil, 503)
	if n := strings.Count(buf.String(), "excluded"); n != 1 {
		t.Fatalf("logged %d exclusions during one, want 1:\n%s", n, buf.String())
	}
	p.Report(d, t0.Add(5*time.Minute), nil, 500) // the first exclusion is over
	if n := strings.Count(buf.String(), "excluded"); n != 2 {
		t.Fatalf("logged %d exclusions for two, want 2:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "destination=d1") {
		t.Fatalf("log does not name the destination:\n%s", buf.String())
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
