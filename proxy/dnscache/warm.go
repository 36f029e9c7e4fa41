package dnscache

import (
	"context"
	"net/netip"
	"sync"
	"time"
)

// Every destination's host name is looked up as soon as a configuration
// is in place, not at its first request. A node that only ever forwards
// some destinations' sessions (active probes fan out across the cluster,
// so it may never probe the others) would otherwise meet a name for the
// first time mid-traffic, perhaps during a DNS hiccup, and a failure
// there is cached for NegativeTTL with nothing older to fall back on. A
// name resolved once keeps its last good addresses through any later DNS
// failure.

// warmLookupTimeout bounds one warm-up lookup.
const warmLookupTimeout = 10 * time.Second

// warmParallel bounds the lookups in flight during a warm-up.
const warmParallel = 8

// Warm looks up, in the background, every name of hosts that is not empty,
// an IP literal or a repeat, at most warmParallel at once, until ctx ends;
// wg counts the warm-up, so its owner can wait for it.
func (r *Resolver) Warm(ctx context.Context, hosts []string, wg *sync.WaitGroup) {
	seen := map[string]bool{}
	var names []string
	for _, h := range hosts {
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		if _, err := netip.ParseAddr(h); err == nil {
			continue
		}
		names = append(names, h)
	}
	if len(names) == 0 {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		sem := make(chan struct{}, warmParallel)
		var lookups sync.WaitGroup
		for _, h := range names {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				lookups.Wait()
				return
			}
			lookups.Add(1)
			go func() {
				defer func() { <-sem; lookups.Done() }()
				lctx, cancel := context.WithTimeout(ctx, warmLookupTimeout)
				defer cancel()
				_, _ = r.LookupHost(lctx, h) // a failure is the resolver's to log and retry
			}()
		}
		lookups.Wait()
	}()
}
