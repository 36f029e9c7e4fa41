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

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func passiveCfg(enabled bool, period time.Duration) config.PassiveHealthCheck {
	return config.PassiveHealthCheck{Enabled: enabled, ReactivationPeriod: config.Duration{Duration: period}}
}

// result is one proxied request's outcome, at an offset from t0.
type result struct {
	at     time.Duration
	err    error
	status int
}

var (
	ok200 = result{status: 200}
	f500  = result{status: 500}
)

// times repeats r n times.
func times(n int, r result) []result {
	out := make([]result, n)
	for i := range out {
		out[i] = r
	}
	return out
}

func at(off time.Duration, r result) result { r.at = off; return r }

func newDest() *upstream.Destination { return upstream.NewDestination("d1", nil, nil, "", nil) }

func report(p *Passive, d *upstream.Destination, rs []result) {
	for _, r := range rs {
		p.Report(d, t0.Add(r.at), r.err, r.status)
	}
}

// TestPassiveFailureKinds checks which results are failures: each case
// reports the result for a full minimum count of requests.
func TestPassiveFailureKinds(t *testing.T) {
	tests := []struct {
		desc         string
		cfg          config.PassiveHealthCheck
		r            result
		wantExcluded bool
	}{
		{"5xx is a failure", passiveCfg(true, time.Minute), result{status: 500}, true},
		{"503 is a failure", passiveCfg(true, time.Minute), result{status: 503}, true},
		{"4xx never counts as a failure", passiveCfg(true, time.Minute), result{status: 404}, false},
		{"2xx is a success", passiveCfg(true, time.Minute), result{status: 200}, false},
		{"transport error is a failure", passiveCfg(true, time.Minute), result{err: errors.New("connection refused"), status: 502}, true},
		{"transport error without a status is a failure", passiveCfg(true, time.Minute), result{err: errors.New("connection reset")}, true},
		{"tether's own timeout (504, DeadlineExceeded) is a failure", passiveCfg(true, time.Minute), result{err: context.DeadlineExceeded, status: 504}, true},
		{"a net timeout is a failure", passiveCfg(true, time.Minute), result{err: timeoutErr{}, status: 504}, true},
		{"client cancellation is not the destination's fault", passiveCfg(true, time.Minute), result{err: context.Canceled, status: 502}, false},
		{"disabled does nothing", passiveCfg(false, time.Minute), result{status: 500}, false},
		{"disabled ignores transport errors too", passiveCfg(false, time.Minute), result{err: errors.New("refused"), status: 502}, false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			d := newDest()
			p := NewPassive(tt.cfg)
			p.Logger = discardLogger()
			report(p, d, times(DefaultMinRequests, tt.r))
			if got := d.PassiveFailed(t0); got != tt.wantExcluded {
				t.Fatalf("PassiveFailed = %v, want %v", got, tt.wantExcluded)
			}
			if got := d.AcceptsNew(t0); got == tt.wantExcluded {
				t.Fatalf("AcceptsNew = %v, want %v", got, !tt.wantExcluded)
			}
		})
	}
}

// TestPassiveFailureRate checks the TransportFailureRate rule: at least
// MinRequests requests in the detection window and a failure rate above
// the limit.
func TestPassiveFailureRate(t *testing.T) {
	cat := func(parts ...[]result) []result {
		var out []result
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	canceled := result{err: context.Canceled}
	tests := []struct {
		desc         string
		opts         PassiveOptions
		results      []result
		wantExcluded bool
	}{
		{"one failure does not exclude", PassiveOptions{}, times(1, f500), false},
		{"9 failures of 9 requests: below the minimum count", PassiveOptions{}, times(9, f500), false},
		{"4 failures of 10 requests exclude (0.4 > 0.3)", PassiveOptions{}, cat(times(4, f500), times(6, ok200)), true},
		{"3 failures of 10 requests do not (0.3 is not above 0.3)", PassiveOptions{}, cat(times(3, f500), times(7, ok200)), false},
		{"successes reaching the minimum count trigger the check", PassiveOptions{}, cat(times(6, ok200), times(4, f500)), true},
		{"4xx counts as a request, never as a failure", PassiveOptions{}, cat(times(3, f500), times(7, result{status: 429})), false},
		{"client cancellations count neither as failures nor as requests", PassiveOptions{}, cat(times(3, f500), times(6, ok200), times(5, canceled)), false},
		{"failures older than the window do not count (3 of 10 left)", PassiveOptions{},
			cat(times(4, f500), times(3, at(DefaultDetectionWindow, f500)), times(7, at(DefaultDetectionWindow, ok200))), false},
		{"failures within the window count (7 of 14)", PassiveOptions{},
			cat(times(4, f500), times(3, at(DefaultDetectionWindow*8/10, f500)), times(7, at(DefaultDetectionWindow*8/10, ok200))), true},
		{"a shorter window forgets sooner", PassiveOptions{Window: 10 * time.Second},
			cat(times(4, f500), times(3, at(10*time.Second, f500)), times(7, at(10*time.Second, ok200))), false},
		{"MinRequests lowers the minimum count", PassiveOptions{MinRequests: 2}, cat(times(1, f500), times(1, ok200)), true},
		{"metadata rate limit honoured (0.5: 5 of 10 do not exclude)",
			PassiveOptions{Metadata: map[string]string{RateLimitMetadataKey: "0.5"}}, cat(times(5, f500), times(5, ok200)), false},
		{"metadata rate limit honoured (0.5: 6 of 10 exclude)",
			PassiveOptions{Metadata: map[string]string{RateLimitMetadataKey: "0.5"}}, cat(times(6, f500), times(4, ok200)), true},
		{"metadata rate limit honoured (0.1: 2 of 10 exclude)",
			PassiveOptions{Metadata: map[string]string{"transportfailureratehealthpolicy.ratelimit": " 0.1 "}}, cat(times(2, f500), times(8, ok200)), true},
		{"a bad metadata rate limit falls back to 0.3",
			PassiveOptions{Metadata: map[string]string{RateLimitMetadataKey: "1.5"}}, cat(times(4, f500), times(6, ok200)), true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			d := newDest()
			opts := tt.opts
			opts.Logger = discardLogger()
			p := NewPassiveWithOptions(passiveCfg(true, time.Hour), opts)
			report(p, d, tt.results)
			last := t0.Add(tt.results[len(tt.results)-1].at)
			if got := d.PassiveFailed(last); got != tt.wantExcluded {
				t.Fatalf("PassiveFailed = %v, want %v", got, tt.wantExcluded)
			}
		})
	}
}

func TestPassiveBadMetadataIsLoggedAndIgnored(t *testing.T) {
	for _, v := range []string{"abc", "0", "-0.2", "1.01", "NaN", ""} {
		var buf bytes.Buffer
		p := NewPassiveWithOptions(passiveCfg(true, 0), PassiveOptions{
			Metadata: map[string]string{RateLimitMetadataKey: v},
			Logger:   slog.New(slog.NewTextHandler(&buf, nil)),
		})
		if p.rateLimit != DefaultFailureRateLimit {
			t.Errorf("rate limit from %q = %v, want the default %v", v, p.rateLimit, DefaultFailureRateLimit)
		}
		if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), RateLimitMetadataKey) {
			t.Errorf("no warning naming the key for %q:\n%s", v, buf.String())
		}
	}
	if p := NewPassiveWithOptions(passiveCfg(true, 0), PassiveOptions{Metadata: map[string]string{RateLimitMetadataKey: "1"}, Logger: discardLogger()}); p.rateLimit != 1 {
		t.Errorf("rate limit 1 (the upper bound) = %v, want 1", p.rateLimit)
	}
}

func TestPassiveReactivation(t *testing.T) {
	burst := func(off time.Duration) []result { return times(DefaultMinRequests, at(off, f500)) }
	tests := []struct {
		desc         string
		period       time.Duration
		results      []result
		at           time.Duration
		wantExcluded bool
	}{
		{"excluded just before the period ends", time.Minute, burst(0), time.Minute - time.Nanosecond, true},
		{"reactivated once the period has passed", time.Minute, burst(0), time.Minute, false},
		{"default period is 2m", 0, burst(0), 2*time.Minute - time.Second, true},
		{"default period ends after 2m", 0, burst(0), 2 * time.Minute, false},
		{"a later exclusion extends it", time.Minute, append(burst(0), burst(30*time.Second)...), 80 * time.Second, true},
		{"an out-of-order earlier report does not shorten it", time.Minute, append(burst(30*time.Second), burst(0)...), 80 * time.Second, true},
		{"the window starts afresh after an exclusion", time.Minute, append(burst(0), at(30*time.Second, f500)), time.Minute, false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			d := newDest()
			p := NewPassive(passiveCfg(true, tt.period))
			p.Logger = discardLogger()
			report(p, d, tt.results)
			if got := d.PassiveFailed(t0.Add(tt.at)); got != tt.wantExcluded {
				t.Fatalf("PassiveFailed(t0+%v) = %v, want %v", tt.at, got, tt.wantExcluded)
			}
		})
	}
}

func TestPassiveWindowSurvivesAReload(t *testing.T) {
	half := func(p *Passive, d *upstream.Destination) {
		report(p, d, append(times(2, f500), times(3, ok200)...)) // 2 of 5
	}
	tests := []struct {
		desc         string
		sameDest     bool
		window       time.Duration
		wantExcluded bool
	}{
		{"the same Destination keeps its window in a new Passive", true, 0, true},
		{"a new Destination starts afresh", false, 0, false},
		{"a reload that changes the window size starts afresh", true, 30 * time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			d := newDest()
			half(NewPassiveWithOptions(passiveCfg(true, time.Minute), PassiveOptions{Logger: discardLogger()}), d)
			if !tt.sameDest {
				d = newDest()
			}
			// The reload: a new Passive (and maybe a new Destination).
			half(NewPassiveWithOptions(passiveCfg(true, time.Minute), PassiveOptions{Window: tt.window, Logger: discardLogger()}), d)
			if got := d.PassiveFailed(t0); got != tt.wantExcluded {
				t.Fatalf("PassiveFailed = %v, want %v (4 failures of 10 across the reload)", got, tt.wantExcluded)
			}
		})
	}
}

func TestPassiveLogsOnlyTheTransitionToExcluded(t *testing.T) {
	var buf bytes.Buffer
	d := newDest()
	p := NewPassiveWithOptions(passiveCfg(true, time.Minute), PassiveOptions{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	report(p, d, times(10, f500))
	report(p, d, times(10, at(time.Second, result{err: errors.New("refused"), status: 502})))
	report(p, d, times(10, at(2*time.Second, f500)))
	if n := strings.Count(buf.String(), "excluded"); n != 1 {
		t.Fatalf("logged %d exclusions during one, want 1:\n%s", n, buf.String())
	}
	report(p, d, times(10, at(5*time.Minute, f500))) // the first exclusion is over
	if n := strings.Count(buf.String(), "excluded"); n != 2 {
		t.Fatalf("logged %d exclusions for two, want 2:\n%s", n, buf.String())
	}
	for _, want := range []string{"destination=d1", "failures=10", "requests=10"} {
		if !strings.Contains(buf.String(), want) {
			t.Fatalf("log lacks %s:\n%s", want, buf.String())
		}
	}
}

func TestPassiveReportDoesNotAllocate(t *testing.T) {
	d := newDest()
	p := NewPassive(passiveCfg(true, time.Minute))
	p.Logger = discardLogger()
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		i++
		status := 200
		if i%10 == 0 {
			status = 502
		}
		p.Report(d, t0.Add(time.Duration(i)*time.Millisecond), nil, status)
	})
	if allocs != 0 {
		t.Fatalf("Report allocates %v times per call, want 0", allocs)
	}
	if d.PassiveFailed(t0.Add(time.Second)) {
		t.Fatal("a 10% failure rate excluded the destination")
	}
}

func BenchmarkPassiveReport(b *testing.B) {
	d := newDest()
	p := NewPassive(passiveCfg(true, time.Minute))
	p.Logger = discardLogger()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		status := 200
		if i%10 == 0 {
			status = 503
		}
		p.Report(d, t0.Add(time.Duration(i)*time.Microsecond), nil, status)
	}
}

func BenchmarkPassiveReportParallel(b *testing.B) {
	d := newDest()
	p := NewPassive(passiveCfg(true, time.Minute))
	p.Logger = discardLogger()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			p.Report(d, t0.Add(time.Duration(i)*time.Microsecond), nil, 200)
		}
	})
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
