package dnscache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Errors returned inside "resolve <host>: ..."; they carry no server detail.
var (
	// ErrNotFound: the name does not exist (NXDOMAIN).
	ErrNotFound = errors.New("no such host")
	// ErrNoAddresses: the name exists but has no A/AAAA records (or none
	// for the network being dialled).
	ErrNoAddresses = errors.New("no addresses")
	// ErrLookupFailed: no server gave an answer (timeout, SERVFAIL, ...).
	ErrLookupFailed = errors.New("lookup failed")
	// ErrInvalidName: the host is not a valid domain name.
	ErrInvalidName = errors.New("invalid host name")
	// ErrClosed: the resolver was closed and the name has no cached
	// addresses to serve.
	ErrClosed = errors.New("resolver closed")
)

// evictAfterTTLs: an entry not looked up for this many MaxTTLs is dropped.
const evictAfterTTLs = 10

// Options configure a Resolver; zero values take the defaults shown.
type Options struct {
	// Servers are "ip" or "ip:port" (port 53 if absent). Default: the
	// nameservers of /etc/resolv.conf, else 127.0.0.1:53.
	Servers []string
	// Search domains tried after the fully-qualified name. Default: those
	// of /etc/resolv.conf when Servers is empty too, else none.
	Search []string
	// HostsFile is consulted before DNS. Default /etc/hosts.
	HostsFile string
	// HostsCheckInterval: how often the hosts file is checked for changes.
	// Default 5s.
	HostsCheckInterval time.Duration
	// MinTTL and MaxTTL clamp record TTLs. Defaults 1s and 5m. MaxTTL also
	// sets eviction: a name not looked up for 10 × MaxTTL is dropped, checked
	// at most once per MaxTTL.
	MinTTL, MaxTTL time.Duration
	// NegativeTTL: wait after a failed lookup before asking again. Default 5s.
	NegativeTTL time.Duration
	// Timeout per DNS query and server. Default 2s. A whole refresh is
	// bounded by Timeout × servers × (1 + search domains).
	Timeout time.Duration
	// Dialer dials the resolved addresses. Default Timeout 5s, KeepAlive 30s.
	Dialer *net.Dialer
	// Now is the clock for expiry (tests). Default time.Now.
	Now func() time.Time
	// Logger receives refresh failures. Default slog.Default().
	Logger *slog.Logger
}

// Resolver resolves destination host names, caching answers for their TTL
// and keeping the last known good addresses when a lookup fails. Expired
// entries are refreshed in the background; Close stops that.
type Resolver struct {
	opts     Options
	servers  []string
	search   []string
	udp, tcp *dns.Client
	hosts    *hostsTable
	budget   time.Duration // upper bound for one refresh
	idle     time.Duration // evict entries unused for this long

	// base is the parent of every refresh; Close cancels it and waits on wg.
	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	cache     map[string]*entry
	calls     map[string]*call
	closed    bool
	lastSweep time.Time
}

// entry is the cached state of one name. Fields other than next are
// guarded by Resolver.mu; addrs and err never change once set.
type entry struct {
	addrs   []netip.Addr // last known good; nil if never resolved
	err     error        // last failure, served when addrs is nil
	expires time.Time    // refresh after this (TTL or NegativeTTL)
	used    time.Time    // last lookup, for eviction
	warned  bool         // the current failure streak was logged
	next    atomic.Uint32
}

// call is one in-flight refresh; callers without addresses wait on it.
type call struct {
	done    chan struct{}
	waiters int // for tests: how many callers joined
	e       *entry
}

// New builds a resolver. It starts no goroutine until a lookup needs a
// refresh; call Close when the data path using it shuts down.
func New(opts Options) *Resolver {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.MinTTL, time.Second)
	def(&opts.MaxTTL, 5*time.Minute)
	opts.MaxTTL = max(opts.MaxTTL, opts.MinTTL)
	def(&opts.NegativeTTL, 5*time.Second)
	def(&opts.Timeout, 2*time.Second)
	def(&opts.HostsCheckInterval, 5*time.Second)
	if opts.HostsFile == "" {
		opts.HostsFile = "/etc/hosts"
	}
	if opts.Dialer == nil {
		opts.Dialer = &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	r := &Resolver{
		opts:   opts,
		idle:   math.MaxInt64,
		search: opts.Search,
		udp:    &dns.Client{Net: "udp", Timeout: opts.Timeout},
		tcp:    &dns.Client{Net: "tcp", Timeout: opts.Timeout},
		hosts:  &hostsTable{path: opts.HostsFile, every: opts.HostsCheckInterval},
		cache:  make(map[string]*entry),
		calls:  make(map[string]*call),
	}
	for _, s := range opts.Servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			s = net.JoinHostPort(s, "53")
		}
		r.servers = append(r.servers, s)
	}
	if len(r.servers) == 0 {
		if cfg, err := dns.ClientConfigFromFile("/etc/resolv.conf"); err == nil {
			for _, s := range cfg.Servers {
				r.servers = append(r.servers, net.JoinHostPort(s, cfg.Port))
			}
			if opts.Search == nil {
				r.search = cfg.Search
			}
		}
		if len(r.servers) == 0 {
			r.servers = []string{"127.0.0.1:53"}
		}
	}
	r.budget = opts.Timeout * time.Duration(len(r.servers)*(1+len(r.search)))
	if opts.MaxTTL <= math.MaxInt64/evictAfterTTLs {
		r.idle = evictAfterTTLs * opts.MaxTTL
	}
	r.base, r.cancel = context.WithCancel(context.Background())
	return r
}

// Close stops background refreshes and waits until they have returned; an
// in-flight query is abandoned at once. It is safe to call more than once.
// Afterwards lookups still serve literals, the hosts file and cached
// addresses (even expired ones) but never query DNS: a name with no
// addresses fails with ErrClosed.
func (r *Resolver) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
}

// LookupHost returns the addresses of host: an IP literal, a hosts-file
// entry or the cached/refreshed DNS answer.
func (r *Resolver) LookupHost(ctx context.Context, host string) ([]netip.Addr, error) {
	addrs, _, err := r.lookup(ctx, host)
	return slices.Clone(addrs), err
}

// lookup also returns the host's round-robin counter (nil for literals).
func (r *Resolver) lookup(ctx context.Context, host string) ([]netip.Addr, *atomic.Uint32, error) {
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err == nil {
		return []netip.Addr{a.Unmap()}, nil, nil
	}
	// A trailing dot stays in the cache key: it means "no search domains".
	name := strings.ToLower(host)
	if _, ok := dns.IsDomainName(name); !ok || name == "" || name == "." {
		return nil, nil, fmt.Errorf("resolve %s: %w", host, ErrInvalidName)
	}
	if h := r.hosts.lookup(strings.TrimSuffix(name, "."), r.opts.Now()); h != nil {
		return h.addrs, &h.next, nil
	}

	now := r.opts.Now()
	r.mu.Lock()
	r.sweepLocked(now)
	e := r.cache[name]
	if e != nil {
		e.used = now
		if now.Before(e.expires) {
			r.mu.Unlock()
			return e.result(host)
		}
		if e.addrs != nil {
			// Stale while revalidate: serve the last known good addresses
			// now; new connections pick up the answer once it is in.
			r.startRefreshLocked(name, host, e)
			r.mu.Unlock()
			return e.addrs, &e.next, nil
		}
	}
	// Nothing to serve: wait for the lookup.
	c := r.startRefreshLocked(name, host, e)
	if c == nil {
		r.mu.Unlock()
		return nil, nil, fmt.Errorf("resolve %s: %w", host, ErrClosed)
	}
	c.waiters++
	r.mu.Unlock()

	select {
	case <-c.done:
		return c.e.result(host)
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("resolve %s: %w", host, ctx.Err())
	}
}

// startRefreshLocked returns the refresh in flight for name, starting one
// if there is none; nil once the resolver is closed. r.mu must be held.
func (r *Resolver) startRefreshLocked(name, host string, old *entry) *call {
	if c := r.calls[name]; c != nil {
		return c
	}
	if r.closed {
		return nil
	}
	c := &call{done: make(chan struct{})}
	r.calls[name] = c
	r.wg.Add(1)
	go r.refresh(name, host, old, c)
	return c
}

// sweepLocked drops entries unused for r.idle, at most once per MaxTTL so
// the cost is amortised over lookups. r.mu must be held.
func (r *Resolver) sweepLocked(now time.Time) {
	if d := now.Sub(r.lastSweep); d >= 0 && d < r.opts.MaxTTL {
		return
	}
	r.lastSweep = now
	for name, e := range r.cache {
		if now.Sub(e.used) >= r.idle && r.calls[name] == nil {
			delete(r.cache, name)
		}
	}
}

func (e *entry) result(host string) ([]netip.Addr, *atomic.Uint32, error) {
	if e.addrs == nil {
		return nil, nil, fmt.Errorf("resolve %s: %w", host, e.err)
	}
	return e.addrs, &e.next, nil
}

// refresh queries DNS for name and installs the outcome. old is the stale
// entry, if any; it keeps its addresses when the query fails. It runs on
// its own goroutine, detached from the callers (one caller giving up must
// not fail the others) but not from Close.
func (r *Resolver) refresh(name, host string, old *entry, c *call) {
	defer r.wg.Done()
	ctx, cancel := context.WithTimeout(r.base, r.budget)
	addrs, ttl, err := r.resolveName(ctx, name)
	cancel()
	now := r.opts.Now()

	r.mu.Lock()
	defer r.mu.Unlock()
	used := now
	if old != nil {
		used = old.used
	}
	var e *entry
	switch {
	case err == nil:
		d := min(max(time.Duration(ttl)*time.Second, r.opts.MinTTL), r.opts.MaxTTL)
		e = &entry{addrs: addrs, expires: now.Add(d), used: used}
		if old != nil && slices.Equal(old.addrs, addrs) {
			e = old // keep the round-robin position
			e.expires, e.warned = now.Add(d), false
		}
	case r.base.Err() != nil:
		// Closed mid-query: not a DNS failure; leave the cache as it was.
		delete(r.calls, name)
		c.e = &entry{err: ErrClosed}
		if old != nil && old.addrs != nil {
			c.e = old
		}
		close(c.done)
		return
	case old != nil && old.addrs != nil:
		e = old
		e.expires = now.Add(r.opts.NegativeTTL)
		if !e.warned {
			e.warned = true
			r.opts.Logger.Warn("dns refresh failed; keeping last known good addresses",
				"host", host, "addresses", e.addrs, "retry_in", r.opts.NegativeTTL, "err", err)
		}
	default:
		e = &entry{err: publicErr(err), expires: now.Add(r.opts.NegativeTTL), used: used}
		r.opts.Logger.Debug("dns lookup failed", "host", host, "err", err)
	}
	r.cache[name] = e
	c.e = e
	delete(r.calls, name)
	close(c.done)
}

// publicErr strips server detail from a query error.
func publicErr(err error) error {
	switch {
	case errors.Is(err, errNXDomain):
		return ErrNotFound
	case errors.Is(err, errNoData):
		return ErrNoAddresses
	default:
		return ErrLookupFailed
	}
}

// DialContext dials addr ("host:port"), resolving host through the cache.
// IP literals are dialled directly. Its signature fits http.Transport.
// Addresses are tried round-robin; a failed dial moves on to the next one,
// at most once per address.
func (r *Resolver) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %q: %w", addr, err)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return r.opts.Dialer.DialContext(ctx, network, addr)
	}
	all, next, err := r.lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	addrs := make([]netip.Addr, 0, len(all))
	for _, a := range all {
		if (!strings.HasSuffix(network, "4") || a.Is4()) && (!strings.HasSuffix(network, "6") || a.Is6()) {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: %w for %s", host, ErrNoAddresses, network)
	}
	start := int(next.Add(1) - 1)
	var lastErr error
	for i := range addrs {
		a := addrs[(start+i)%len(addrs)]
		conn, err := r.opts.Dialer.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return conn, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("dial %s: %w", host, lastErr)
}
