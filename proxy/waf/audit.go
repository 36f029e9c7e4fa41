package waf

import (
	"context"
	"log/slog"
	"strconv"

	"github.com/corazawaf/coraza/v3/types"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the WAF's collectors (named tether_waf_…, as docs/CONFIGURATION.md,
// "Web application firewall", lists them).
type metrics struct {
	requests *prometheus.CounterVec
	matches  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_waf_requests_total",
			Help: "Requests inspected by the web application firewall, by route and action (allowed, detected, blocked).",
		}, []string{"route", "action"}),
		matches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_waf_rule_matches_total",
			Help: "Logged rule matches of the web application firewall, by rule id.",
		}, []string{"rule_id"}),
	}
	if reg != nil {
		m.requests = register(reg, m.requests)
		m.matches = register(reg, m.matches)
	}
	return m
}

// register registers c, or returns the collector already registered (a
// rebuilt Firewall, or a second Proxy on one registry, shares it).
func register(reg prometheus.Registerer, c *prometheus.CounterVec) *prometheus.CounterVec {
	if err := reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			if e, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return e
			}
		}
	}
	return c
}

func (m *metrics) actionCounters(route string) (c [numActions]prometheus.Counter) {
	for a := range c {
		c[a] = m.requests.WithLabelValues(route, actionNames[a])
	}
	return c
}

// Forget drops the series of routes that are gone.
func (f *Firewall) Forget(route string) {
	if f == nil {
		return
	}
	for _, a := range actionNames {
		f.metrics.requests.DeleteLabelValues(route, a)
	}
}

// auditRule is one logged rule match in the audit line.
type auditRule struct {
	ID       int    `json:"id"`
	Msg      string `json:"msg,omitempty"`
	Data     string `json:"data,omitempty"`
	Severity string `json:"severity,omitempty"`
	// Match names what matched ("ARGS:id"), as ModSecurity's "found
	// within".
	Match string `json:"match,omitempty"`
}

type logRule interface{ Log() bool }

// Done ends the request: the logging phase, the audit line for a flagged
// request, the metrics. Safe on a nil Tx.
func (t *Tx) Done() {
	if t == nil {
		return
	}
	tx := t.tx
	tx.ProcessLogging()
	if t.act == actAllowed && tx.DetectionOnlyInterruption() != nil {
		t.act = actDetected // a response phase found it
	}
	t.p.counts[t.act].Inc()
	var rules []auditRule
	var ids []int
	for _, mr := range tx.MatchedRules() {
		if l, ok := mr.(logRule); ok && !l.Log() {
			continue
		}
		md := mr.Rule()
		ar := auditRule{ID: md.ID(), Msg: mr.Message(), Data: mr.Data()}
		if md.Severity() >= 0 {
			ar.Severity = md.Severity().String()
		}
		if mds := mr.MatchedDatas(); len(mds) > 0 {
			ar.Match = mds[0].Variable().Name()
			if k := mds[0].Key(); k != "" {
				ar.Match += ":" + k
			}
		}
		rules = append(rules, ar)
		ids = append(ids, md.ID())
		t.p.fw.metrics.matches.WithLabelValues(strconv.Itoa(md.ID())).Inc()
	}
	if len(rules) > 0 || t.act != actAllowed || t.reason != "" {
		attrs := []slog.Attr{
			slog.String("trace_id", t.traceID),
			slog.String("route", t.p.route),
			slog.String("mode", t.p.Mode()),
			slog.String("action", actionNames[t.act]),
			slog.Int("anomaly_score", t.score()),
			slog.Any("rule_ids", ids),
		}
		if t.status != 0 {
			attrs = append(attrs, slog.Int("status", t.status))
		}
		if t.reason != "" {
			attrs = append(attrs, slog.String("reason", t.reason))
		}
		if it := t.interruption(); it != nil && it.RuleID != 0 {
			attrs = append(attrs, slog.Int("interrupting_rule", it.RuleID))
		}
		attrs = append(attrs, slog.Any("rules", rules))
		t.p.fw.audit.LogAttrs(context.Background(), slog.LevelWarn, "waf", attrs...)
	}
	t.release()
}

func (t *Tx) interruption() *types.Interruption {
	if it := t.tx.Interruption(); it != nil {
		return it
	}
	return t.tx.DetectionOnlyInterruption()
}

// score is CRS's inbound anomaly score (the one compared with
// AnomalyThreshold), 0 when CRS did not compute it.
func (t *Tx) score() int {
	v := t.tx.Variables().TX().Get("blocking_inbound_anomaly_score")
	if len(v) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(v[0])
	return n
}
