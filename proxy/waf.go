package proxy

import (
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/waf"
)

// buildWaf compiles the snapshot's web application firewall (nil when no
// route runs it), keeping the old snapshot's rule set when its settings
// and rule files are unchanged. Compile (p nil) only checks.
func buildWaf(cfg *config.Config, p *Proxy, old *runtime) (*waf.Firewall, config.Errors) {
	var prev *waf.Firewall
	var opts waf.Options
	if old != nil {
		prev = old.waf
	}
	if p != nil {
		opts.Registerer = p.opts.Registerer
		opts.Audit = p.opts.WafLog
		if opts.Audit == nil {
			opts.Audit = p.logger.With("log", "waf")
		}
	}
	return waf.New(cfg, prev, opts)
}

// stopWaf drops the WAF series of routes that are gone.
func (rt *runtime) stopWaf(next *runtime) {
	if rt.waf == nil {
		return
	}
	for id := range rt.routesByID {
		if next == nil || next.routesByID[id] == nil || next.routesByID[id].waf == nil {
			rt.waf.Forget(id)
		}
	}
}
