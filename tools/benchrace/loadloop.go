package main

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"
)

// loadRequest is one request of a worker of runWorkers: it reports
// whether its TLS handshake resumed a session (false where none is made).
type loadRequest func() (resumed bool, err error)

// runWorkers is the load loop of the Go load generators (tlsload,
// h3load): n workers, each with the request newWorker(i) makes for it (in
// the worker's goroutine, so a warm-up request it sends is within the
// run), send it over and over until dur has passed. The figures are the
// latencies of the requests that succeeded; a run where none did is an
// error, prefixed with name, with the first request's error.
func runWorkers(name string, n int, dur time.Duration, newWorker func(i int) loadRequest) (res loadResult, resumed int64, err error) {
	var (
		mu    sync.Mutex
		lat   []float64
		errs  int64
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(dur)
	for i := range n {
		wg.Go(func() {
			do := newWorker(i)
			var mine []float64
			var e, r int64
			var fe error
			for time.Now().Before(end) {
				t0 := time.Now()
				did, err := do()
				if err != nil {
					e++
					fe = cmp.Or(fe, err)
					continue
				}
				if did {
					r++
				}
				mine = append(mine, float64(time.Since(t0).Microseconds()))
			}
			mu.Lock()
			lat = append(lat, mine...)
			errs += e
			resumed += r
			first = cmp.Or(first, fe)
			mu.Unlock()
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if len(lat) == 0 {
		return loadResult{}, 0, fmt.Errorf("%s: no request completed (%d errors, the first: %v)", name, errs, first)
	}
	slices.Sort(lat)
	return loadResult{Requests: int64(len(lat)), Seconds: secs, RPS: float64(len(lat)) / secs,
		P50us: percentile(lat, 50), P99us: percentile(lat, 99), Errors: errs}, resumed, nil
}
