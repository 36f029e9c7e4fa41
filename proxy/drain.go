package proxy

import (
	"fmt"
	"time"
)

// DrainTimeout is how long destination destID of cluster clusterID keeps
// its affinitized sessions once draining (the cluster's DrainTimeout). The
// leader turns it into the absolute deadline it replicates.
func (p *Proxy) DrainTimeout(clusterID, destID string) (time.Duration, error) {
	cl := p.rt.Load().clusters[clusterID]
	if cl == nil {
		return 0, fmt.Errorf("cluster %q: %w", clusterID, ErrNotFound)
	}
	if cl.up.Destination(destID) == nil {
		return 0, fmt.Errorf("cluster %q destination %q: %w", clusterID, destID, ErrNotFound)
	}
	return cl.drainTimeout, nil
}

// ApplyDrains sets every destination's drain state from drain, which
// reports the deadline of a draining destination (ok false: not draining).
// The node calls it whenever the replicated drain state changes and after
// each reload, so destinations a reload adds get their state too.
func (p *Proxy) ApplyDrains(drain func(clusterID, destID string) (deadline time.Time, ok bool)) {
	for id, cl := range p.rt.Load().clusters {
		for _, d := range cl.up.Destinations {
			deadline, ok := drain(id, d.ID)
			cur, curDeadline := d.Draining()
			switch {
			case ok && (!cur || !curDeadline.Equal(deadline)):
				if deadline.IsZero() {
					deadline = time.Unix(0, 1) // drained at once
				}
				d.SetDraining(deadline)
			case !ok && cur:
				d.SetDraining(time.Time{})
			}
		}
	}
}
