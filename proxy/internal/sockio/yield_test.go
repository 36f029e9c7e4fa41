package sockio

import (
	"net"
	goruntime "runtime"
	"sync"
	"testing"
)

// groupedRounds runs trials rounds of len(conns) goroutines readied at
// once, each noting "ready", writing a byte on its connection and noting
// "wrote", and counts the rounds in which every "ready" came before the
// first "wrote".
func groupedRounds(t *testing.T, conns []net.Conn, trials int) int {
	t.Helper()
	grouped := 0
	for range trials {
		var (
			mu     sync.Mutex
			events []bool // true: ready, false: wrote
			wg     sync.WaitGroup
		)
		start := make(chan struct{})
		for _, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				mu.Lock()
				events = append(events, true)
				mu.Unlock()
				if _, err := c.Write([]byte{'x'}); err != nil {
					t.Error(err)
				}
				mu.Lock()
				events = append(events, false)
				mu.Unlock()
			}()
		}
		close(start)
		wg.Wait()
		if len(events) != 2*len(conns) {
			t.Fatalf("%d events, want %d", len(events), 2*len(conns))
		}
		ok := true
		for _, ready := range events[:len(conns)] {
			ok = ok && ready
		}
		if ok {
			grouped++
		}
	}
	return grouped
}

// TestSockConnWritesWaitForTheRound: on one P, a write lets the goroutines
// already runnable go first, so the writes of a scheduling round leave
// together (writeYield); with the yield off each goroutine writes
// before the next one runs. The scheduler looks at its global queue first
// on every 61st tick, which can let a yielded writer back early, so the
// grouping is asked of most rounds, not all.
func TestSockConnWritesWaitForTheRound(t *testing.T) {
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(1))
	defer SetWriteYield(WriteYield())
	const writers, trials = 4, 20
	conns := make([]net.Conn, writers)
	for i := range conns {
		conns[i], _ = tcpPair(t, true)
	}

	SetWriteYield(true)
	if got := groupedRounds(t, conns, trials); got < trials/2 {
		t.Errorf("yield on: the writes of a round went out together in %d of %d rounds, want at least %d", got, trials, trials/2)
	} else {
		t.Logf("yield on: grouped in %d of %d rounds", got, trials)
	}

	SetWriteYield(false)
	if got := groupedRounds(t, conns, trials); got > trials/4 {
		t.Errorf("yield off: the writes of a round went out together in %d of %d rounds, want at most %d", got, trials, trials/4)
	} else {
		t.Logf("yield off: grouped in %d of %d rounds", got, trials)
	}
}
