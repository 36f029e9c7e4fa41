package admin

import (
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// Event types of GET /v1/events. Every event carries its type, the time
// the node saw the change and the node that saw it; data says what changed.
const (
	// EventHello opens every stream: the node the stream comes from.
	EventHello = "hello"
	// EventLeader: the Raft leader this node follows changed.
	EventLeader = "leader"
	// EventMember: a member appeared, changed gossip state or Raft role,
	// or was removed.
	EventMember = "member"
	// EventKey: a key was installed, activated, superseded, expired,
	// revoked or pruned.
	EventKey = "key"
	// EventHealth: a destination's local or cluster-wide health flipped.
	EventHealth = "health"
	// EventDrain: a destination started or stopped draining.
	EventDrain = "drain"
	// EventStats carries this node's traffic figures every statsInterval;
	// it is not kept for replay (it is a sample, not a change).
	EventStats = "stats"
)

const (
	// watchInterval is the backstop of the change watcher: most changes
	// wake it at once; leader changes and time-driven key states are seen
	// within it.
	watchInterval = 500 * time.Millisecond
	// statsInterval is how often traffic figures are sampled and sent.
	statsInterval = 2 * time.Second
	// staleSample: an earlier traffic sample older than this gives no rate.
	staleSample = 10 * time.Second
)

// observed is what the watcher compares between rounds.
type observed struct {
	leader  string
	members map[string]Member
	keys    map[string]string
	drains  map[string]drainObs  // "cluster/destination"
	health  map[string][2]string // "cluster/destination" → local, cluster
	// healthGen and healthClusters are what health was read at: the health
	// generation and the clusters (a reload makes new ones). While both stay, the next round
	// takes the same map, so a round costs nothing per destination.
	healthGen      uint64
	healthClusters []*upstream.Cluster
	// healthReused: health is the round before's map (nothing changed),
	// so the diff skips it instead of walking 10,000 keys to find nothing.
	healthReused bool
}

// drainObs is a drain as the watcher saw it: its deadline, and whether it
// had passed (drained), so the moment a drain ends is an event too.
type drainObs struct {
	deadline time.Time
	drained  bool
}

// Watch turns changes of the node's view (leader, members, keys, drains,
// health) into events, by comparing snapshots: every node reports what it
// sees, whichever node made the change. It runs until stop.
func (a *API) Watch(stop <-chan struct{}) {
	prev := a.observe(nil)
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	lastStats := time.Time{}
	for {
		select {
		case <-stop:
			return
		case <-a.Wake:
		case <-t.C:
		}
		cur := a.observe(&prev)
		a.emitDiff(prev, cur, time.Now())
		prev = cur
		// Stats only for a reader: a sample gathers the whole metrics
		// registry, which with 10,000 destinations is a burst of CPU that
		// showed in the data path's p99 every 2 s.
		if now := time.Now(); now.Sub(lastStats) >= statsInterval && a.Bus.Subscribers() > 0 {
			lastStats = now
			a.Bus.Sample(EventStats, now, a.trafficSample(now))
		}
	}
}

// observe reads the node's view; prev, when not nil, is the round before,
// whose health map is taken again when no health changed since.
func (a *API) observe(prev *observed) observed {
	o := observed{
		members: map[string]Member{},
		keys:    map[string]string{},
		drains:  map[string]drainObs{},
	}
	o.leader, _ = a.Store.Leader()
	for _, m := range a.Node.Members() {
		o.members[m.ID] = m
	}
	for _, md := range a.Ring.List(time.Now()) {
		o.keys[md.ID] = md.State.String()
	}
	now := time.Now()
	for _, d := range a.Store.Drains() {
		o.drains[d.Cluster+"/"+d.Destination] = drainObs{d.Deadline, !now.Before(d.Deadline)}
	}
	o.health, o.healthGen, o.healthClusters, o.healthReused = observeHealth(a.Proxy, prev)
	return o
}

// clusterSource is what observeHealth reads (the data path).
type clusterSource interface {
	ClusterIDs() []string
	Cluster(id string) *upstream.Cluster
}

// observeHealth is every destination's local and cluster health, or
// prev's map when no health changed and the clusters are the same
// (reused): with 10,000 destinations, building it is 10,000 keys every
// round.
func observeHealth(p clusterSource, prev *observed) (health map[string][2]string, gen uint64, clusters []*upstream.Cluster, reused bool) {
	gen = upstream.HealthGen() // before the reads: a change during them is seen next round
	ids := p.ClusterIDs()
	clusters = make([]*upstream.Cluster, 0, len(ids))
	for _, cid := range ids {
		if c := p.Cluster(cid); c != nil {
			clusters = append(clusters, c)
		}
	}
	if prev != nil && prev.health != nil && prev.healthGen == gen && slices.Equal(prev.healthClusters, clusters) {
		return prev.health, gen, clusters, true
	}
	health = map[string][2]string{}
	for _, c := range clusters {
		for _, d := range c.Destinations {
			health[c.ID+"/"+d.ID] = [2]string{d.LocalHealth().String(), d.ActiveHealth().String()}
		}
	}
	return health, gen, clusters, false
}

// emitDiff publishes one event per difference, in a stable order.
func (api *API) emitDiff(a, b observed, now time.Time) {
	bus := api.Bus
	if a.leader != b.leader {
		bus.Publish(EventLeader, now, map[string]any{"leader": b.leader, "previous": a.leader})
	}
	for _, id := range unionKeys(a.members, b.members) {
		was, had := a.members[id]
		is, has := b.members[id]
		switch {
		case !had:
			bus.Publish(EventMember, now, map[string]any{"id": id, "change": "joined", "state": is.State, "raft": is.Raft, "address": is.Address, "version": is.Version})
		case !has:
			bus.Publish(EventMember, now, map[string]any{"id": id, "change": "removed", "state": "removed", "previous": was.State})
		case was.State != is.State:
			bus.Publish(EventMember, now, map[string]any{"id": id, "change": "state", "state": is.State, "previous": was.State, "raft": is.Raft})
		case was.Raft != is.Raft:
			bus.Publish(EventMember, now, map[string]any{"id": id, "change": "raft", "state": is.State, "raft": is.Raft, "previous_raft": was.Raft})
		case was.Version != is.Version || was.Address != is.Address:
			bus.Publish(EventMember, now, map[string]any{"id": id, "change": "updated", "state": is.State, "version": is.Version, "address": is.Address})
		}
	}
	for _, id := range unionKeys(a.keys, b.keys) {
		was, had := a.keys[id]
		is, has := b.keys[id]
		switch {
		case !has:
			bus.Publish(EventKey, now, map[string]any{"id": id, "state": "pruned", "previous": was})
		case !had || was != is:
			bus.Publish(EventKey, now, map[string]any{"id": id, "state": is, "previous": was})
		}
	}
	for _, k := range unionKeys(a.drains, b.drains) {
		cid, did, _ := strings.Cut(k, "/")
		was, had := a.drains[k]
		is, has := b.drains[k]
		changed := has && (!had || !was.deadline.Equal(is.deadline) || was.drained != is.drained)
		switch {
		case changed && is.drained:
			bus.Publish(EventDrain, now, map[string]any{"cluster": cid, "destination": did, "draining": false, "state": "drained", "since": is.deadline.UTC()})
		case changed:
			bus.Publish(EventDrain, now, map[string]any{"cluster": cid, "destination": did, "draining": true, "state": "draining", "deadline": is.deadline.UTC()})
		case had && !has:
			bus.Publish(EventDrain, now, map[string]any{"cluster": cid, "destination": did, "draining": false, "state": "undrained"})
		}
	}
	if b.healthReused {
		// The same map as a's: sorting the union of 10,000 keys every
		// round to find no change cost an idle node with 10,000
		// destinations 1.7 % of a core, on the core its data path runs on.
		return
	}
	for _, k := range unionKeys(a.health, b.health) {
		was, had := a.health[k]
		is, has := b.health[k]
		if !had || !has {
			continue // a reload added or removed the destination
		}
		cid, did, _ := strings.Cut(k, "/")
		for i, view := range []string{"local", "cluster"} {
			if was[i] != is[i] {
				bus.Publish(EventHealth, now, map[string]any{"cluster": cid, "destination": did, "view": view, "state": is[i], "previous": was[i]})
			}
		}
	}
}

func unionKeys[V any](a, b map[string]V) []string {
	seen := make(map[string]bool, len(a)+len(b))
	out := make([]string, 0, len(a)+len(b))
	for _, m := range []map[string]V{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}

// trafficRates keeps the previous sample of the request counters, to turn
// them into per-second rates.
type trafficRates struct {
	mu     sync.Mutex
	prevAt time.Time
	prev   map[string]float64 // "cluster/destination" → requests
	rate   map[string]float64
}

// trafficTotals reads this node's request and affinity counters from its
// registry (the data path's own metrics: no second count on the hot path).
func (a *API) trafficTotals() (requests map[string]float64, affinity map[string]map[string]float64) {
	requests, affinity = map[string]float64{}, map[string]map[string]float64{}
	mfs, err := a.Registry.Gather()
	if err != nil && len(mfs) == 0 {
		return requests, affinity
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "tether_requests_total":
			for _, m := range mf.GetMetric() {
				cid, did := labelValue(m.GetLabel(), "cluster"), labelValue(m.GetLabel(), "destination")
				if cid != "" && did != "" {
					requests[cid+"/"+did] += m.GetCounter().GetValue()
				}
			}
		case "tether_affinity_requests_total":
			for _, m := range mf.GetMetric() {
				cid, outcome := labelValue(m.GetLabel(), "cluster"), labelValue(m.GetLabel(), "outcome")
				if affinity[cid] == nil {
					affinity[cid] = map[string]float64{}
				}
				affinity[cid][outcome] += m.GetCounter().GetValue()
			}
		}
	}
	return requests, affinity
}

// labelPair is a gathered metric's label (client_model's LabelPair).
type labelPair interface {
	GetName() string
	GetValue() string
}

// labelValue is the value of a metric's label name ("" if it has none).
func labelValue[L labelPair](labels []L, name string) string {
	for _, l := range labels {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// sampleRates takes a new sample when the last is at least a second old
// and returns the rates between the last two samples.
func (a *API) sampleRates(now time.Time, totals map[string]float64) map[string]float64 {
	tr := &a.traffic
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if dt := now.Sub(tr.prevAt); tr.prev == nil || dt >= time.Second {
		if tr.prev != nil && dt > staleSample {
			// Nobody sampled for a while: an average over that long is
			// not a rate; start again from here.
			tr.prev, tr.rate = nil, nil
		}
		if tr.prev != nil {
			rate := make(map[string]float64, len(totals))
			for k, v := range totals {
				if d := v - tr.prev[k]; d > 0 {
					rate[k] = d / dt.Seconds()
				} else {
					rate[k] = 0
				}
			}
			tr.rate = rate
		}
		tr.prev, tr.prevAt = totals, now
	}
	return tr.rate
}

// affinityView is a cluster's affinity outcomes on this node (Envoy's
// names; proxy/DESIGN.md, "Session affinity"), every outcome present.
func affinityView(counts map[string]float64) map[string]uint64 {
	out := map[string]uint64{"routed": 0, "failed_open": 0, "failed_closed": 0, "no_session": 0}
	for k, v := range counts {
		out[k] = uint64(v)
	}
	return out
}

// trafficSample is the data of a stats event: per cluster, this node's
// affinity outcomes, and per destination its in-flight requests, request
// total and rate; this node's applied index and every member's durable
// index (they move without a change event: gossip carries them).
func (a *API) trafficSample(now time.Time) map[string]any {
	requests, affinity := a.trafficTotals()
	rates := a.sampleRates(now, requests)
	clusters := []map[string]any{}
	for _, cid := range a.Proxy.ClusterIDs() {
		c := a.Proxy.Cluster(cid)
		if c == nil {
			continue
		}
		dests := make([]map[string]any, 0, len(c.Destinations))
		for _, d := range c.Destinations {
			k := cid + "/" + d.ID
			dests = append(dests, map[string]any{
				"id":                  d.ID,
				"inflight":            d.Inflight(),
				"requests_total":      uint64(requests[k]),
				"requests_per_second": roundRate(rates[k]),
			})
		}
		clusters = append(clusters, map[string]any{"cluster": cid, "affinity": affinityView(affinity[cid]), "destinations": dests})
	}
	durable := map[string]uint64{}
	for _, m := range a.Node.Members() {
		durable[m.ID] = m.DurableIndex
	}
	return map[string]any{"clusters": clusters, "applied_index": a.Store.AppliedIndex(), "durable_index": durable}
}

func roundRate(r float64) float64 { return float64(int64(r*10+0.5)) / 10 }

// handleEvents serves GET /v1/events: a text/event-stream of the node's
// events, starting with a hello, then the recorded events after the
// Last-Event-ID header (all of them without one), then live ones.
func (a *API) events(w http.ResponseWriter, r *http.Request) {
	a.Bus.Serve(w, r, a.Stop, func(replayed int, gap bool) Event {
		leader, _ := a.Store.Leader()
		return Event{Type: EventHello, Time: time.Now().UTC(), Node: a.NodeID, Data: map[string]any{
			"version":    a.Version,
			"boot":       a.Bus.Boot(),
			"started":    a.Started.UTC(),
			"admin":      a.AdminAddr(),
			"leader":     leader,
			"raft_state": a.Store.State(),
			"replayed":   replayed,
			"gap":        gap,
		}}
	})
}
