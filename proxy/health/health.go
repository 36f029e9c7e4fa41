package health

import (
	"github.com/tether-proxy/tether/proxy/upstream"
)

// Observer receives this node's probe verdicts. It decides the effective
// health of a destination: the default (LocalObserver) takes the verdict as
// it is; a cluster-wide observer gossips it and combines it with other
// nodes' verdicts. Observe is called from probe goroutines, once per change
// of this node's verdict; it must not block for long.
type Observer interface {
	Observe(clusterID, destID string, h upstream.Health)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(clusterID, destID string, h upstream.Health)

// Observe calls f.
func (f ObserverFunc) Observe(clusterID, destID string, h upstream.Health) { f(clusterID, destID, h) }

// LocalObserver makes this node's verdict the effective health of c's
// destinations (SetLocalHealth and SetActiveHealth), as a single node would.
func LocalObserver(c *upstream.Cluster) Observer { return localObserver{c} }

type localObserver struct{ c *upstream.Cluster }

var (
	_ Observer = localObserver{}
	_ Observer = ObserverFunc(nil)
)

func (o localObserver) Observe(_, destID string, h upstream.Health) {
	if d := o.c.Destination(destID); d != nil {
		d.SetLocalHealth(h)
		d.SetActiveHealth(h)
	}
}
