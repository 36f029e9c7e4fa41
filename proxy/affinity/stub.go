package affinity

// Placeholder implementation, replaced by the affinity engine.

import (
	"net/http"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/upstream"
)

type impl struct{}

func newProvider(clusterID string, cfg config.SessionAffinity, c *upstream.Cluster, opts Options) (*Provider, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	return &Provider{}, nil
}

func (p *Provider) resolve(r *http.Request, c *upstream.Cluster, now time.Time, buf []*upstream.Destination) Decision {
	return Decision{Outcome: NoSession, Candidates: c.AppendAvailable(buf, now), Attach: true}
}

func (p *Provider) rewriteRequest(in, out *http.Request, dest *upstream.Destination, d Decision) {}

func (p *Provider) affinitize(resp *http.Response, dest *upstream.Destination, d Decision, secure bool) {
}
