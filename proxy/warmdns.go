package proxy

// warmDNS looks up, in the background, every destination host name of rt
// (dnscache.Resolver.Warm); a no-op when the proxy does not own its
// resolver (Options.Dial).
func (p *Proxy) warmDNS(rt *runtime) {
	if p.resolver == nil {
		return
	}
	var hosts []string
	for _, id := range rt.clusterIDs {
		for _, d := range rt.clusters[id].up.Destinations {
			hosts = append(hosts, d.Address.Hostname())
			if d.HealthAddress != nil {
				hosts = append(hosts, d.HealthAddress.Hostname())
			}
		}
	}
	p.resolver.Warm(p.warmCtx, hosts, &p.warm)
}
