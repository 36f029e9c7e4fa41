package leader

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/keyring"
)

// KeyView is one key as GET /v1/keyring shows it. An installed key carries
// a placeholder activation time far ahead until the leader activates it
// (once every alive member holds it durably, or after ActivationWait);
// Pending says what it actually waits for.
type KeyView struct {
	keyring.Metadata
	Pending string `json:"pending,omitempty"`
}

// KeyViews lists the keys of a listing with, for each installed key, what
// its activation waits for as this node sees it.
func (l *Leader) KeyViews(mds []keyring.Metadata, now time.Time) []KeyView {
	out := make([]KeyView, 0, len(mds))
	for _, md := range mds {
		v := KeyView{Metadata: md}
		if md.State == keyring.Installed {
			v.Pending = l.pendingReason(md.ID, now)
		}
		out = append(out, v)
	}
	return out
}

// pendingReason says what an installed key's activation waits for. The
// leader knows the index the key needs and how long it has waited; another
// node compares the members' gossiped durable indexes with what it has
// applied itself, which is at least what the key needs.
func (l *Leader) pendingReason(id string, now time.Time) string {
	st := l.cfg.Store
	index, left := st.AppliedIndex(), time.Duration(-1)
	if st.IsLeader() {
		l.st.mu.Lock()
		p, ok := l.st.pending[id]
		l.st.mu.Unlock()
		if ok {
			index, left = p.index, max(ActivationWait-now.Sub(p.since), 0)
		}
	}
	lacking, failed := l.keyLaggards(index)
	// The leader committed the key, so it holds it: its durable index,
	// gossiped a moment later (or, on the leader, its own snapshot being
	// written), is no wait worth naming.
	if leader, _ := st.Leader(); leader != "" {
		lacking = slices.DeleteFunc(lacking, func(id string) bool { return id == leader })
	}
	switch {
	case len(lacking) == 0 && len(failed) == 0:
		return "every member holds it: activates within a second"
	case len(lacking) > 0:
		// Alive or suspect members hold the activation up for as long as they lack it.
		return fmt.Sprintf("waiting for members: %s", strings.Join(lacking, ", "))
	case left >= 0:
		return fmt.Sprintf("waiting for failed members: %s (passed over in at most %s)", strings.Join(failed, ", "), left.Round(time.Second))
	default:
		return fmt.Sprintf("waiting for failed members: %s (passed over after %s)", strings.Join(failed, ", "), ActivationWait)
	}
}

// keyringCollector exports keyring figures (never material).
type keyringCollector struct {
	l        *Leader
	keys     *prometheus.Desc
	active   *prometheus.Desc
	lag      *prometheus.Desc
	laggards *prometheus.Desc
}

func newKeyringCollector(l *Leader) *keyringCollector {
	return &keyringCollector{
		l:      l,
		keys:   prometheus.NewDesc("tether_keyring_keys", "Keys in the keyring by state.", []string{"state"}, nil),
		active: prometheus.NewDesc("tether_keyring_active_key_expires_timestamp_seconds", "When the active key expires (Unix time).", nil, nil),
		lag: prometheus.NewDesc("tether_keyring_pending_activation_seconds",
			"On the leader: how long the oldest installed key has waited for every member to hold it (0: none waits).", nil, nil),
		laggards: prometheus.NewDesc("tether_keyring_activation_laggards",
			"On the leader: members (alive, suspect or failed) that do not hold an installed key yet.", nil, nil),
	}
}

func (c *keyringCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.keys
	ch <- c.active
	ch <- c.lag
	ch <- c.laggards
}

func (c *keyringCollector) Collect(ch chan<- prometheus.Metric) {
	ring := c.l.cfg.Ring
	if ring == nil {
		return
	}
	now := time.Now()
	counts := map[string]int{}
	for _, s := range []keyring.State{keyring.Installed, keyring.Active, keyring.Inactive, keyring.Expired, keyring.Revoked} {
		counts[s.String()] = 0
	}
	activeID := ring.ActiveKeyID(now)
	for _, md := range ring.List(now) {
		counts[md.State.String()]++
		if md.ID == activeID {
			ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(md.Expires.Unix()))
		}
	}
	for state, v := range counts {
		ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(v), state)
	}
	c.l.st.mu.Lock()
	lag, laggards := c.l.st.lag, c.l.st.laggards
	c.l.st.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, lag.Seconds())
	ch <- prometheus.MustNewConstMetric(c.laggards, prometheus.GaugeValue, float64(laggards))
}
