package proxy

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
// failure (proxy/dnscache).

// warmLookupTimeout bounds one warm-up lookup.
const warmLookupTimeout = 10 * time.Second

// warmParallel bounds the lookups in flight during a warm-up.
const warmParallel = 8

// warmDNS looks up, in the background, every destination host name of rt
// that is not an IP literal; a no-op when the proxy does not own its
// resolver (Options.Dial).
func (p *Proxy) warmDNS(rt *runtime) {
	if p.resolver == nil {
		return
	}
	seen := map[string]bool{}
	var hosts []string
	for _, id := range rt.clusterIDs {
		for _, d := range rt.clusters[id].up.Destinations {
			hs := [2]string{d.Address.Hostname()}
			if d.HealthAddress != nil {
				hs[1] = d.HealthAddress.Hostname()
			}
			for _, u := range hs {
				if u == "" || seen[u] {
					continue
				}
				seen[u] = true
				if _, err := netip.ParseAddr(u); err == nil {
					continue
				}
				hosts = append(hosts, u)
			}
		}
	}
	if len(hosts) == 0 {
		return
	}
	p.warm.Add(1)
	go func() {
		defer p.warm.Done()
		sem := make(chan struct{}, warmParallel)
		var wg sync.WaitGroup
		for _, h := range hosts {
			select {
			case sem <- struct{}{}:
			case <-p.warmCtx.Done():
				wg.Wait()
				return
			}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				ctx, cancel := context.WithTimeout(p.warmCtx, warmLookupTimeout)
				defer cancel()
				_, _ = p.resolver.LookupHost(ctx, h) // a failure is the resolver's to log and retry
			}()
		}
		wg.Wait()
	}()
}
