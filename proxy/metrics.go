package proxy

import (
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/proxy/accesslog"
	"github.com/tether-proxy/tether/proxy/affinity"
	"github.com/tether-proxy/tether/proxy/forwarded"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// metrics are the data path's collectors (DESIGN.md, "Metrics").
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
	affinity *prometheus.CounterVec
	// underscore counts request fields dropped for their underscore
	// spelling (package forwarded), by the field they fold into.
	underscore      *prometheus.CounterVec
	underscoreDrops forwarded.Drops
	// tooSlow counts requests ended for a client slower than a minimum
	// data rate (rate.go), by direction.
	tooSlow *prometheus.CounterVec
}

var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

func newMetrics(reg prometheus.Registerer, p *Proxy, logger *slog.Logger) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_requests_total",
			Help: "Requests handled by the data path, by route, cluster, destination and status code.",
		}, []string{"route", "cluster", "destination", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tether_request_duration_seconds",
			Help:    "Time from receiving a request to the end of its response.",
			Buckets: durationBuckets,
		}, []string{"route", "cluster", "destination"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_proxy_errors_total",
			Help: "Requests tether answered itself because it could not proxy them, by kind.",
		}, []string{"cluster", "kind"}),
		affinity: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_affinity_requests_total",
			Help: "Session affinity resolutions by outcome (Envoy's stateful session statistics).",
		}, []string{"cluster", "outcome"}),
		underscore: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_underscore_headers_dropped_total",
			Help: "Request header fields dropped because, with '_' read as '-', they name a framing, hop-by-hop or forwarding field (Transfer_Encoding), by that field.",
		}, []string{"header"}),
		tooSlow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_requests_too_slow_total",
			Help: "Requests ended because the client sent the body (direction=request: answered 408, or cut once the response had started) or read the response (direction=response: cut) slower than Limits.MinRequestBodyDataRate or MinResponseDataRate.",
		}, []string{"direction"}),
	}
	defer func() {
		// Bound once: the names are a fixed set.
		m.underscoreDrops = forwarded.NewDrops(func(k string) prometheus.Counter { return m.underscore.WithLabelValues(k) })
	}()
	if reg == nil {
		return m
	}
	m.requests = register(reg, m.requests)
	m.duration = register(reg, m.duration)
	m.errors = register(reg, m.errors)
	m.affinity = register(reg, m.affinity)
	m.underscore = register(reg, m.underscore)
	m.tooSlow = register(reg, m.tooSlow)
	if err := reg.Register(&stateCollector{p: p}); err != nil {
		logger.Warn("destination state metrics not registered", "err", err)
	}
	return m
}

// register registers c, or returns the collector already registered under
// the same descriptors (a second Proxy on one registry shares them).
func register[T prometheus.Collector](reg prometheus.Registerer, c T) T {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if e, ok := are.ExistingCollector.(T); ok {
				return e
			}
		}
	}
	return c
}

// destStats are the label-bound series of one (route, cluster,
// destination), built with the runtime so the hot path never calls
// WithLabelValues once a status code has been seen.
type destStats struct {
	labels   [3]string
	requests *prometheus.CounterVec
	// durations is the vector; duration its series for labels, bound on
	// the first request: a cluster of 10,000 destinations does not carry
	// 10,000 histograms (a larger heap for every GC to mark) for
	// destinations that never took a request.
	durations *prometheus.HistogramVec
	duration  atomic.Pointer[prometheus.Observer]
	codes     atomic.Pointer[[]codeCounter]
	mu        sync.Mutex
	lines     *accesslog.Targets // the access line's labels, encoded
}

type codeCounter struct {
	code int
	c    prometheus.Counter
}

func (m *metrics) stats(route, cluster, dest string) *destStats {
	return &destStats{labels: [3]string{route, cluster, dest}, requests: m.requests, durations: m.duration, lines: accesslog.NewTargets(route, cluster, dest)}
}

// observe records one request's duration.
func (s *destStats) observe(seconds float64) {
	if o := s.duration.Load(); o != nil {
		(*o).Observe(seconds)
		return
	}
	s.mu.Lock()
	o := s.duration.Load()
	if o == nil {
		obs := s.durations.WithLabelValues(s.labels[0], s.labels[1], s.labels[2])
		o = &obs
		s.duration.Store(o)
	}
	s.mu.Unlock()
	(*o).Observe(seconds)
}

// count increments the request counter for code: a lock-free scan of the
// codes seen so far, and a copy-on-write insert for a new one.
func (s *destStats) count(code int) {
	if cs := s.codes.Load(); cs != nil {
		for _, cc := range *cs {
			if cc.code == code {
				cc.c.Inc()
				return
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var cur []codeCounter
	if cs := s.codes.Load(); cs != nil {
		cur = *cs
		for _, cc := range cur {
			if cc.code == code {
				cc.c.Inc()
				return
			}
		}
	}
	c := s.requests.WithLabelValues(s.labels[0], s.labels[1], s.labels[2], strconv.Itoa(code))
	next := append(append(make([]codeCounter, 0, len(cur)+1), cur...), codeCounter{code, c})
	s.codes.Store(&next)
	c.Inc()
}

// affinityCounters binds tether_affinity_requests_total for one cluster.
func (m *metrics) affinityCounters(cluster string) [4]prometheus.Counter {
	var out [4]prometheus.Counter
	for _, o := range []affinity.Outcome{affinity.NoSession, affinity.Routed, affinity.FailedOpen, affinity.FailedClosed} {
		out[o] = m.affinity.WithLabelValues(cluster, o.String())
	}
	return out
}

// errorCounters binds tether_proxy_errors_total for one cluster.
func (m *metrics) errorCounters(cluster string) [numKinds]prometheus.Counter {
	var out [numKinds]prometheus.Counter
	for k := kindNoRoute; k < numKinds; k++ {
		out[k] = m.errors.WithLabelValues(cluster, kindNames[k])
	}
	return out
}

// forget drops the series of routes and destinations that old had and cur
// does not, so removed backends do not linger in /metrics.
func (m *metrics) forget(old, cur *runtime) {
	if old == nil {
		return
	}
	for id := range old.routesByID {
		if _, ok := cur.routesByID[id]; !ok {
			m.requests.DeletePartialMatch(prometheus.Labels{"route": id})
			m.duration.DeletePartialMatch(prometheus.Labels{"route": id})
		}
	}
	for id, oc := range old.clusters {
		nc := cur.clusters[id]
		if nc == nil {
			m.requests.DeletePartialMatch(prometheus.Labels{"cluster": id})
			m.duration.DeletePartialMatch(prometheus.Labels{"cluster": id})
			m.errors.DeletePartialMatch(prometheus.Labels{"cluster": id})
			m.affinity.DeletePartialMatch(prometheus.Labels{"cluster": id})
			continue
		}
		for _, d := range oc.up.Destinations {
			if nc.up.Destination(d.ID) == nil {
				m.requests.DeletePartialMatch(prometheus.Labels{"cluster": id, "destination": d.ID})
				m.duration.DeletePartialMatch(prometheus.Labels{"cluster": id, "destination": d.ID})
			}
		}
	}
}

// stateCollector reports destination state from the current runtime at
// scrape time.
type stateCollector struct{ p *Proxy }

var (
	descHealth = prometheus.NewDesc("tether_destination_health",
		"Destination health by source: 1 healthy, 0 unhealthy, -1 unknown. local: this node's probes; cluster: the effective probe view; passive: proxied traffic on this node.",
		[]string{"cluster", "destination", "source"}, nil)
	descInflight = prometheus.NewDesc("tether_destination_inflight",
		"Requests currently proxied to the destination by this node.",
		[]string{"cluster", "destination"}, nil)
	descDraining = prometheus.NewDesc("tether_destination_draining",
		"1 while the destination is draining: no new sessions, its own sessions until the drain deadline.",
		[]string{"cluster", "destination"}, nil)
	descDrained = prometheus.NewDesc("tether_destination_drained",
		"1 once a drained destination's deadline has passed (it serves nothing) until it is undrained.",
		[]string{"cluster", "destination"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descHealth
	ch <- descInflight
	ch <- descDraining
	ch <- descDrained
}

func healthValue(h upstream.Health) float64 {
	switch h {
	case upstream.Healthy:
		return 1
	case upstream.Unhealthy:
		return 0
	}
	return -1
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	rt := c.p.rt.Load()
	if rt == nil {
		return
	}
	now := c.p.now()
	for _, id := range rt.clusterIDs {
		cl := rt.clusters[id]
		for _, d := range cl.up.Destinations {
			passive := 1.0
			if d.PassiveFailed(now) {
				passive = 0
			}
			ch <- prometheus.MustNewConstMetric(descHealth, prometheus.GaugeValue, healthValue(d.LocalHealth()), id, d.ID, "local")
			ch <- prometheus.MustNewConstMetric(descHealth, prometheus.GaugeValue, healthValue(d.ActiveHealth()), id, d.ID, "cluster")
			ch <- prometheus.MustNewConstMetric(descHealth, prometheus.GaugeValue, passive, id, d.ID, "passive")
			ch <- prometheus.MustNewConstMetric(descInflight, prometheus.GaugeValue, float64(d.Inflight()), id, d.ID)
			draining, drained := 0.0, 0.0
			if on, deadline := d.Draining(); on && now.Before(deadline) {
				draining = 1
			} else if on {
				drained = 1
			}
			ch <- prometheus.MustNewConstMetric(descDraining, prometheus.GaugeValue, draining, id, d.ID)
			ch <- prometheus.MustNewConstMetric(descDrained, prometheus.GaugeValue, drained, id, d.ID)
		}
	}
}
