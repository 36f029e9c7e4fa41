package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// Defaults for ActiveHealthCheck fields left zero (config.Load normally
// fills them in already).
const (
	DefaultInterval             = 15 * time.Second
	DefaultTimeout              = 10 * time.Second
	DefaultPath                 = "/"
	DefaultHealthyStatuses      = "200-399"
	DefaultConsecutiveFailures  = 3
	DefaultConsecutiveSuccesses = 1
)

// ThresholdMetadataKey is YARP's cluster metadata key for the number of
// consecutive failures that mark a destination unhealthy.
const ThresholdMetadataKey = "ConsecutiveFailuresHealthPolicy.Threshold"

// maxProbeBody bounds how much of a probe response is read, so the
// connection can be reused without trusting the backend's body size.
const maxProbeBody = 64 << 10

// ActiveOptions are the active checker's collaborators.
type ActiveOptions struct {
	// Transport is the cluster's data-path transport. An *http.Transport
	// is never used itself: the checker probes with its own small copy of
	// it (ProbeTransport: same dialer and TLS settings, its own pool).
	// Another RoundTripper (a test fake) is used as it is. Nil: a copy of
	// http.DefaultTransport.
	Transport http.RoundTripper
	// Metadata is the cluster's metadata (YARP reads
	// "ConsecutiveFailuresHealthPolicy.Threshold" from it). It applies only
	// when the config's ConsecutiveFailures is 0, as in config.Load.
	Metadata map[string]string
	// Logger; nil: slog.Default().
	Logger *slog.Logger
	// Observer receives this node's verdicts and decides the destination's
	// effective health. Nil: LocalObserver(c). Whatever the observer, the
	// checker itself records its verdict as the destination's LocalHealth.
	Observer Observer
	// ShouldProbe reports, before every probe, whether this node probes the
	// destination (probe fan-out). Nil: every destination is probed. When it
	// turns false for a destination with a verdict, the verdict becomes
	// Unknown (this node no longer has an opinion) and is reported as a
	// change.
	ShouldProbe func(clusterID, destID string) bool
	// OnChange, when set, is called after each change of this node's verdict
	// for a destination (from the probe goroutine; keep it short).
	OnChange func(clusterID string, d *upstream.Destination, h upstream.Health)
}

// Active probes the destinations of one cluster.
type Active struct {
	clusterID        string
	enabled          bool
	interval         time.Duration
	timeout          time.Duration
	statuses         config.StatusRanges
	failThreshold    int
	successThreshold int
	client           *http.Client
	// own is the checker's probe transport when it made one; Stop closes
	// its idle connections.
	own         *http.Transport
	observer    Observer
	shouldProbe func(clusterID, destID string) bool
	onChange    func(clusterID string, d *upstream.Destination, h upstream.Health)
	logger      *slog.Logger
	targets     []*target

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	// running counts live probe goroutines (tests check it reaches 0).
	running atomic.Int32
}

// target is one destination and its probe state, owned by its goroutine.
// This node's current verdict is not kept here: it is the destination's
// LocalHealth, read in every round, because a reload builds a new checker
// while the old one still probes the same Destination until it is stopped;
// a copy taken at build time could miss the old checker's last flip and
// never record a change again.
type target struct {
	d   *upstream.Destination
	url string
	// fails and successes count the current run of equal probe results.
	fails     int
	successes int
}

// NewActive builds a checker; it does nothing until Start. Zero config
// fields take the Default* values; an invalid HealthyStatuses (config
// validation rejects it first) is logged and replaced by the default.
func NewActive(clusterID string, c *upstream.Cluster, cfg config.ActiveHealthCheck, opts ActiveOptions) *Active {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("cluster", clusterID)
	a := &Active{
		clusterID:        clusterID,
		enabled:          cfg.Enabled,
		interval:         orDuration(cfg.Interval.Duration, DefaultInterval),
		timeout:          orDuration(cfg.Timeout.Duration, DefaultTimeout),
		failThreshold:    failThreshold(cfg.ConsecutiveFailures, opts.Metadata, logger),
		successThreshold: orInt(cfg.ConsecutiveSuccesses, DefaultConsecutiveSuccesses),
		observer:         opts.Observer,
		shouldProbe:      opts.ShouldProbe,
		onChange:         opts.OnChange,
		logger:           logger,
	}
	a.statuses = parseStatuses(cfg.HealthyStatuses, logger)
	if a.observer == nil {
		a.observer = LocalObserver(c)
	}
	transport, own := probeTransport(opts.Transport)
	a.own = own
	a.client = &http.Client{
		Transport: transport,
		// A redirect is an answer in itself (3xx is healthy by default);
		// following it would probe some other server.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	path := cfg.Path
	if path == "" {
		path = DefaultPath
	}
	for _, d := range c.Destinations {
		// No verdict is copied: rounds compare with d.LocalHealth(), so a
		// reload (which keeps destinations) neither reports a flip that did
		// not happen nor hides one the old checker made meanwhile.
		a.targets = append(a.targets, &target{d: d, url: probeURL(d.HealthAddress, path, cfg.Query)})
	}
	return a
}

// Start begins probing in the background: every destination is probed at
// once, then every Interval. It does nothing when the config's Enabled is
// false, when already started, or after Stop.
func (a *Active) Start() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.enabled || a.started || a.stopped {
		return
	}
	a.started = true
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	for _, t := range a.targets {
		a.wg.Add(1)
		a.running.Add(1)
		go a.run(ctx, t)
	}
}

// Stop ends probing and waits for probe goroutines to exit. A probe in
// flight is cancelled and its result ignored. Stop may be called more than
// once, and without Start.
func (a *Active) Stop() {
	a.mu.Lock()
	a.stopped = true
	if a.cancel != nil {
		a.cancel()
	}
	a.mu.Unlock()
	a.wg.Wait()
	if a.own != nil {
		a.own.CloseIdleConnections()
	}
}

func (a *Active) run(ctx context.Context, t *target) {
	defer a.wg.Done()
	defer a.running.Add(-1)
	tick := time.NewTicker(a.interval)
	defer tick.Stop()
	for {
		a.round(ctx, t)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// round probes t once (if this node should) and records the result. A
// panic (a bad callback, a bug) is logged and the loop goes on.
func (a *Active) round(ctx context.Context, t *target) {
	defer func() {
		if v := recover(); v != nil {
			a.logger.Error("health probe panicked", "destination", t.d.ID, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		}
	}()
	if a.shouldProbe != nil && !a.shouldProbe(a.clusterID, t.d.ID) {
		t.fails, t.successes = 0, 0
		if prev := t.d.LocalHealth(); prev != upstream.Unknown {
			a.change(t, prev, upstream.Unknown, "no longer probed by this node")
		}
		return
	}
	err := a.probe(ctx, t)
	if ctx.Err() != nil {
		return // stopping: the probe was cut short, not failed
	}
	// Read after the probe: the verdict may have moved while it was out.
	prev := t.d.LocalHealth()
	if err == nil {
		t.fails = 0
		if t.successes < a.successThreshold {
			t.successes++
		}
		if prev != upstream.Healthy && t.successes >= a.successThreshold {
			a.change(t, prev, upstream.Healthy, "")
		}
		return
	}
	t.successes = 0
	if t.fails < a.failThreshold {
		t.fails++
	}
	if prev != upstream.Unhealthy && t.fails >= a.failThreshold {
		a.change(t, prev, upstream.Unhealthy, err.Error())
	}
}

// change records a new verdict (prev is the one it replaces): LocalHealth,
// the observer, a log line and OnChange, in that order.
func (a *Active) change(t *target, prev, h upstream.Health, reason string) {
	t.d.SetLocalHealth(h)
	a.observer.Observe(a.clusterID, t.d.ID, h)
	attrs := []any{"destination", t.d.ID, "health", h.String(), "previous", prev.String()}
	if reason != "" {
		attrs = append(attrs, "reason", reason)
	}
	// Turning unhealthy is a warning (a backend is down); healthy again,
	// or no longer probed here, is news.
	level := slog.LevelInfo
	if h == upstream.Unhealthy {
		level = slog.LevelWarn
	}
	a.logger.Log(context.Background(), level, "destination health changed", attrs...)
	if a.onChange != nil {
		a.onChange(a.clusterID, t.d, h)
	}
}

// errStatus is a probe answered with a status outside HealthyStatuses.
type errStatus int

func (e errStatus) Error() string { return "probe answered " + strconv.Itoa(int(e)) }

// probe sends one GET and reports nil when the status is healthy.
func (a *Active) probe(ctx context.Context, t *target) error {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url, nil)
	if err != nil {
		return err
	}
	if t.d.Host != "" {
		req.Host = t.d.Host
	}
	req.Header.Set("User-Agent", "tether-health-probe")
	resp, err := a.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("probe timed out after %v", a.timeout)
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBody))
	resp.Body.Close()
	if !a.statuses.Contains(resp.StatusCode) {
		return errStatus(resp.StatusCode)
	}
	return nil
}

// probeURL joins the destination's health base URL with the probe path and
// query ("http://h/base/" + "/healthz" + "?ready=1").
func probeURL(base *url.URL, path, query string) string {
	if base == nil {
		return ""
	}
	u := base.JoinPath(path)
	if q := strings.TrimPrefix(query, "?"); q != "" {
		u.RawQuery = q
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

func parseStatuses(s string, logger *slog.Logger) config.StatusRanges {
	if strings.TrimSpace(s) != "" {
		r, err := config.ParseStatusRanges(s)
		if err == nil {
			return r
		}
		logger.Warn("invalid HealthCheck.Active.HealthyStatuses, using the default", "value", s, "default", DefaultHealthyStatuses, "error", err)
	}
	r, _ := config.ParseStatusRanges(DefaultHealthyStatuses)
	return r
}

// failThreshold is cfg's value, else YARP's metadata key (matched
// case-insensitively, as config.Load does), else the default.
func failThreshold(cfg int, metadata map[string]string, logger *slog.Logger) int {
	if cfg > 0 {
		return cfg
	}
	for k, v := range metadata {
		if !strings.EqualFold(k, ThresholdMetadataKey) {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err == nil && n >= 1 {
			return n
		}
		logger.Warn("invalid cluster metadata, using the default", "key", k, "value", v, "default", DefaultConsecutiveFailures)
	}
	return DefaultConsecutiveFailures
}

func orDuration(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func orInt(n, def int) int {
	if n <= 0 {
		return def
	}
	return n
}
