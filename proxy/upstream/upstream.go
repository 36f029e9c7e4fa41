package upstream

import (
	"math"
	"net/url"
	"sort"
	"sync/atomic"
	"time"
)

// stateGen counts changes of any destination's availability (health, passive
// exclusion, drain). Clusters cache their available destinations and rebuild
// the list only when it moves; such changes are rare next to requests, so
// one counter for the process is simpler than one per cluster and as good.
var stateGen atomic.Uint64

// healthGen counts changes of any destination's local or effective health:
// a reader of every destination's health (the node's event watcher) reads
// them again only when it moved.
var healthGen atomic.Uint64

// HealthGen is the count of health changes so far (see healthGen).
func HealthGen() uint64 { return healthGen.Load() }

// Health is a destination's health as one source sees it.
type Health int32

const (
	// Unknown means no probe has answered yet; like YARP, unknown counts as
	// available so a cluster serves before its first probe round.
	Unknown Health = iota
	Healthy
	Unhealthy
)

func (h Health) String() string {
	switch h {
	case Healthy:
		return "healthy"
	case Unhealthy:
		return "unhealthy"
	default:
		return "unknown"
	}
}

// Destination is one backend: its configuration plus small atomic state that
// the health checkers, the load balancers and the admin API share. A
// Destination is reused across config reloads while its id and addresses stay
// the same, so health and in-flight counts survive a reload.
type Destination struct {
	ID string
	// Address is the backend base URL requests are forwarded to.
	Address *url.URL
	// HealthAddress is the base URL for active probes (Address when not set).
	HealthAddress *url.URL
	// Host, when set, overrides the Host header sent to this destination.
	Host     string
	Metadata map[string]string
	// AffinityKey is the input to affinity keys: Metadata["AffinityKey"] when
	// set, else ID. Destinations sharing it form one affinity group.
	AffinityKey string

	inflight atomic.Int64
	// active is the health decided by probes (locally now; the cluster-wide
	// view once gossip feeds it).
	active atomic.Int32
	// local is this node's own probe verdict, kept apart from active so the
	// admin API can show both.
	local atomic.Int32
	// passiveUntil is the UnixNano until which passive failures exclude the
	// destination on this node; 0 when not excluded.
	passiveUntil atomic.Int64
	// drainDeadline is the UnixNano at which a draining destination stops
	// serving its existing sessions; 0 when not draining.
	drainDeadline atomic.Int64
	// passiveState is the passive health policy's own record of recent
	// results, kept here so it lives exactly as long as the destination
	// (across reloads that keep it).
	passiveState atomic.Pointer[any]
}

// NewDestination builds a destination. healthAddr may be nil.
func NewDestination(id string, addr, healthAddr *url.URL, host string, metadata map[string]string) *Destination {
	d := &Destination{ID: id, Address: addr, HealthAddress: healthAddr, Host: host, Metadata: metadata, AffinityKey: id}
	if d.HealthAddress == nil {
		d.HealthAddress = addr
	}
	if k := metadata["AffinityKey"]; k != "" {
		d.AffinityKey = k
	}
	return d
}

// Inflight is the number of requests currently proxied to the destination.
func (d *Destination) Inflight() int64 { return d.inflight.Load() }

// Begin counts a request as in flight; call Done when it ends.
func (d *Destination) Begin() { d.inflight.Add(1) }

// Done ends a request counted by Begin.
func (d *Destination) Done() { d.inflight.Add(-1) }

// SetActiveHealth records the effective probe-based health.
func (d *Destination) SetActiveHealth(h Health) {
	if d.active.Swap(int32(h)) != int32(h) {
		stateGen.Add(1)
		healthGen.Add(1)
	}
}

// ActiveHealth is the effective probe-based health.
func (d *Destination) ActiveHealth() Health { return Health(d.active.Load()) }

// SetLocalHealth records this node's own probe verdict.
func (d *Destination) SetLocalHealth(h Health) {
	if d.local.Swap(int32(h)) != int32(h) {
		healthGen.Add(1)
	}
}

// LocalHealth is this node's own probe verdict.
func (d *Destination) LocalHealth() Health { return Health(d.local.Load()) }

// MarkPassiveFailure excludes the destination on this node until t.
func (d *Destination) MarkPassiveFailure(until time.Time) {
	d.passiveUntil.Store(until.UnixNano())
	stateGen.Add(1)
}

// ClearPassiveFailure ends a passive exclusion early.
func (d *Destination) ClearPassiveFailure() {
	d.passiveUntil.Store(0)
	stateGen.Add(1)
}

// PassiveState returns the passive health policy's state for d, made by
// mk on first use. Only package health knows what it holds.
func (d *Destination) PassiveState(mk func() any) any {
	if v := d.passiveState.Load(); v != nil {
		return *v
	}
	nv := mk()
	if d.passiveState.CompareAndSwap(nil, &nv) {
		return nv
	}
	return *d.passiveState.Load()
}

// PassiveUntil is the end of the current passive exclusion; zero when none
// was ever set.
func (d *Destination) PassiveUntil() time.Time {
	if u := d.passiveUntil.Load(); u != 0 {
		return time.Unix(0, u)
	}
	return time.Time{}
}

// PassiveFailed reports whether passive health excludes the destination at now.
func (d *Destination) PassiveFailed(now time.Time) bool {
	u := d.passiveUntil.Load()
	return u != 0 && now.UnixNano() < u
}

// Healthy reports whether the destination may receive traffic at all:
// probes do not say unhealthy and passive health does not exclude it.
func (d *Destination) Healthy(now time.Time) bool {
	return d.ActiveHealth() != Unhealthy && !d.PassiveFailed(now)
}

// SetDraining starts draining with the given deadline; the zero time stops it.
func (d *Destination) SetDraining(deadline time.Time) {
	defer stateGen.Add(1)
	if deadline.IsZero() {
		d.drainDeadline.Store(0)
		return
	}
	d.drainDeadline.Store(deadline.UnixNano())
}

// Draining reports whether the destination is draining, and its deadline.
func (d *Destination) Draining() (bool, time.Time) {
	u := d.drainDeadline.Load()
	if u == 0 {
		return false, time.Time{}
	}
	return true, time.Unix(0, u)
}

// AcceptsNew reports whether the destination may take new sessions (and,
// without affinity, new requests): healthy and not draining.
func (d *Destination) AcceptsNew(now time.Time) bool {
	return d.drainDeadline.Load() == 0 && d.Healthy(now)
}

// AcceptsExisting reports whether the destination may serve a request that
// belongs to an existing affinitized session: healthy, and either not
// draining or still before its drain deadline.
func (d *Destination) AcceptsExisting(now time.Time) bool {
	if !d.Healthy(now) {
		return false
	}
	u := d.drainDeadline.Load()
	return u == 0 || now.UnixNano() < u
}

// Cluster is the runtime view of one configured cluster's destinations.
type Cluster struct {
	ID string
	// Destinations are sorted by ID; the slice is never modified after New.
	Destinations []*Destination
	byID         map[string]*Destination
	avail        atomic.Pointer[availability]
}

// availability is a cached list of the destinations that accept new
// requests, valid while stateGen stays at gen and until the earliest
// passive exclusion in the cluster runs out.
type availability struct {
	gen   uint64
	until int64
	list  []*Destination
}

// NewCluster builds a cluster over dests (sorted by ID here).
func NewCluster(id string, dests []*Destination) *Cluster {
	sorted := append([]*Destination(nil), dests...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	c := &Cluster{ID: id, Destinations: sorted, byID: make(map[string]*Destination, len(sorted))}
	for _, d := range sorted {
		c.byID[d.ID] = d
	}
	return c
}

// Destination returns the destination with the given id, or nil.
func (c *Cluster) Destination(id string) *Destination { return c.byID[id] }

// Available returns the destinations that accept new requests at now. The
// list is cached and shared: callers must not modify it. It costs one
// atomic load per request and is rebuilt only after a destination's health,
// passive exclusion or drain state changed, or an exclusion ran out.
func (c *Cluster) Available(now time.Time) []*Destination {
	gen := stateGen.Load()
	n := now.UnixNano()
	if a := c.avail.Load(); a != nil && a.gen == gen && n < a.until {
		return a.list
	}
	a := &availability{gen: gen, until: math.MaxInt64, list: make([]*Destination, 0, len(c.Destinations))}
	for _, d := range c.Destinations {
		if d.AcceptsNew(now) {
			a.list = append(a.list, d)
		}
		if u := d.passiveUntil.Load(); u > n && u < a.until {
			a.until = u
		}
	}
	c.avail.Store(a)
	return a.list
}

// AppendAvailable appends to buf the destinations that accept new requests.
func (c *Cluster) AppendAvailable(buf []*Destination, now time.Time) []*Destination {
	for _, d := range c.Destinations {
		if d.AcceptsNew(now) {
			buf = append(buf, d)
		}
	}
	return buf
}
