package dnscache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
)

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
	// MinTTL and MaxTTL clamp record TTLs. Defaults 1s and 5m.
	MinTTL, MaxTTL time.Duration
	// NegativeTTL: wait after a failed lookup before asking again. Default 5s.
	NegativeTTL time.Duration
	// Timeout per DNS query and server. Default 2s.
	Timeout time.Duration
	// Dialer dials the resolved addresses. Default Timeout 5s, KeepAlive 30s.
	Dialer *net.Dialer
	// Now is the clock for expiry (tests). Default time.Now.
	Now func() time.Time
	// Logger receives refresh failures. Default slog.Default().
	Logger *slog.Logger
}

// Resolver resolves destination host names, caching answers for their TTL
// and keeping the last known good addresses when a lookup fails.
type Resolver struct {
	opts     Options
	servers  []string
	search   []string
	udp, tcp *dns.Client
	hosts    *hostsTable

	mu    sync.Mutex
	cache map[string]*entry
	calls map[string]*call
}

// entry is the cached state of one name.
type entry struct {
	addrs   []netip.Addr // last known good; nil if never resolved
	err     error        // last failure, served when addrs is nil
	expires time.Time    // refresh after this (TTL or NegativeTTL)
	warned  bool         // the current failure streak was logged
	next    atomic.Uint32
}

// call is one in-flight refresh that concurrent callers wait on.
type call struct {
	done    chan struct{}
	waiters int // for tests: how many callers joined
	e       *entry
}

// New builds a resolver.
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
	return r
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

	r.mu.Lock()
	e := r.cache[name]
	if e != nil && r.opts.Now().Before(e.expires) {
		r.mu.Unlock()
		return e.result(host)
	}
	c := r.calls[name]
	if c == nil {
		c = &call{done: make(chan struct{})}
		r.calls[name] = c
		// Detached from ctx: one caller giving up must not fail the others.
		go r.refresh(context.WithoutCancel(ctx), name, host, e, c)
	}
	c.waiters++
	r.mu.Unlock()

	select {
	case <-c.done:
		return c.e.result(host)
	case <-ctx.Done():
		if e != nil && e.addrs != nil {
			return e.addrs, &e.next, nil // stale beats nothing
		}
		return nil, nil, fmt.Errorf("resolve %s: %w", host, ctx.Err())
	}
}

func (e *entry) result(host string) ([]netip.Addr, *atomic.Uint32, error) {
	if e.addrs == nil {
		return nil, nil, fmt.Errorf("resolve %s: %w", host, e.err)
	}
	return e.addrs, &e.next, nil
}

// refresh queries DNS for name and installs the outcome. old is the stale
// entry, if any; it keeps its addresses when the query fails.
func (r *Resolver) refresh(ctx context.Context, name, host string, old *entry, c *call) {
	addrs, ttl, err := r.resolveName(ctx, name)
	now := r.opts.Now()

	r.mu.Lock()
	defer r.mu.Unlock()
	var e *entry
	switch {
	case err == nil:
		d := min(max(time.Duration(ttl)*time.Second, r.opts.MinTTL), r.opts.MaxTTL)
		e = &entry{addrs: addrs, expires: now.Add(d)}
		if old != nil && slices.Equal(old.addrs, addrs) {
			e = old // keep the round-robin position
			e.expires, e.warned = now.Add(d), false
		}
	case old != nil && old.addrs != nil:
		e = old
		e.expires = now.Add(r.opts.NegativeTTL)
		if !e.warned {
			e.warned = true
			r.opts.Logger.Warn("dns refresh failed; keeping last known good addresses",
				"host", host, "addresses", e.addrs, "retry_in", r.opts.NegativeTTL, "err", err)
		}
	default:
		e = &entry{err: publicErr(err), expires: now.Add(r.opts.NegativeTTL)}
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
