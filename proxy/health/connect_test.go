package health

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// refused is a connect failure as the data path reports it.
type refused struct{}

func (refused) Error() string        { return "dial tcp 127.0.0.1:1: connect: connection refused" }
func (refused) ConnectFailure() bool { return true }

// TestPassiveConsecutiveConnectFailures: ConsecutiveConnectFailures
// connect failures in a row exclude a destination at once, without the
// rate window's 10 requests; any other result breaks the run.
func TestPassiveConsecutiveConnectFailures(t *testing.T) {
	conn := result{err: fmt.Errorf("proxy: %w", refused{}), status: 502}
	other := result{err: errors.New("connection reset by peer"), status: 502}
	cat := func(parts ...[]result) []result {
		var out []result
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		desc         string
		opts         PassiveOptions
		results      []result
		wantExcluded bool
	}{
		{"3 connect failures in a row exclude", PassiveOptions{}, times(3, conn), true},
		{"2 do not", PassiveOptions{}, times(2, conn), false},
		{"a success breaks the run", PassiveOptions{}, cat(times(2, conn), times(1, ok200), times(2, conn)), false},
		{"a 5xx breaks the run (the destination answered)", PassiveOptions{}, cat(times(2, conn), times(1, f500), times(2, conn)), false},
		{"another transport error breaks the run", PassiveOptions{}, cat(times(2, conn), times(1, other), times(2, conn)), false},
		{"the run spans the detection window", PassiveOptions{}, cat(times(2, conn), times(1, at(10*DefaultDetectionWindow, conn))), true},
		{"ConsecutiveConnectFailures sets the run", PassiveOptions{ConsecutiveConnectFailures: 5}, times(4, conn), false},
		{"ConsecutiveConnectFailures 5: the fifth excludes", PassiveOptions{ConsecutiveConnectFailures: 5}, times(5, conn), true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			d := newDest()
			tt.opts.Logger = discardLogger()
			p := NewPassiveWithOptions(passiveCfg(true, time.Minute), tt.opts)
			report(p, d, tt.results)
			last := t0
			if n := len(tt.results); n > 0 {
				last = t0.Add(tt.results[n-1].at)
			}
			if got := d.PassiveFailed(last); got != tt.wantExcluded {
				t.Fatalf("PassiveFailed = %v, want %v", got, tt.wantExcluded)
			}
		})
	}
	if !IsConnectFailure(fmt.Errorf("wrapped: %w", refused{})) || IsConnectFailure(errors.New("refused")) || IsConnectFailure(nil) {
		t.Fatal("IsConnectFailure misjudges")
	}
}
