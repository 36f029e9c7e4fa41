package dnscache

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// Internal outcomes of one query; lookup maps them to the exported errors.
var (
	errNXDomain = errors.New("NXDOMAIN")
	errNoData   = errors.New("no records")
)

// maxCNAMEQueries bounds re-queries for a chain the server left unresolved.
const maxCNAMEQueries = 4

// resolveName tries the fully-qualified name, then each search domain while
// the answer is "does not exist". It returns the addresses and the smallest
// TTL (seconds) seen.
func (r *Resolver) resolveName(ctx context.Context, name string) ([]netip.Addr, uint32, error) {
	cands := []string{dns.Fqdn(name)}
	if !strings.HasSuffix(name, ".") {
		for _, s := range r.search {
			cands = append(cands, dns.Fqdn(name+"."+strings.Trim(s, ".")))
		}
	}
	var err error
	for _, c := range cands {
		var addrs []netip.Addr
		var ttl uint32
		addrs, ttl, err = r.resolveFQDN(ctx, c)
		if err == nil {
			return addrs, ttl, nil
		}
		if !errors.Is(err, errNXDomain) && !errors.Is(err, errNoData) {
			return nil, 0, err
		}
	}
	return nil, 0, err
}

// resolveFQDN queries A and AAAA in parallel; addresses from either suffice.
func (r *Resolver) resolveFQDN(ctx context.Context, fqdn string) ([]netip.Addr, uint32, error) {
	var v6 []netip.Addr
	var ttl6 uint32
	var err6 error
	done := make(chan struct{})
	go func() {
		defer close(done)
		v6, ttl6, err6 = r.resolveType(ctx, fqdn, dns.TypeAAAA)
	}()
	v4, ttl4, err4 := r.resolveType(ctx, fqdn, dns.TypeA)
	<-done
	if addrs := append(v4, v6...); len(addrs) > 0 {
		return addrs, min(ttl4, ttl6), nil // a failed type reports TTL max
	}
	for _, e := range []error{err4, err6} {
		if !errors.Is(e, errNXDomain) && !errors.Is(e, errNoData) {
			return nil, 0, e // a real failure wins over "not found"
		}
	}
	if errors.Is(err4, errNXDomain) && errors.Is(err6, errNXDomain) {
		return nil, 0, errNXDomain
	}
	return nil, 0, errNoData
}

// resolveType queries one record type, following CNAME chains.
func (r *Resolver) resolveType(ctx context.Context, fqdn string, qtype uint16) ([]netip.Addr, uint32, error) {
	const none = ^uint32(0)
	minTTL, name := none, fqdn
	for range maxCNAMEQueries {
		in, err := r.exchange(ctx, name, qtype)
		if err != nil {
			return nil, none, err
		}
		if in.Rcode == dns.RcodeNameError {
			return nil, none, errNXDomain
		}
		final, addrs, ttl := extract(in, name, qtype)
		minTTL = min(minTTL, ttl)
		if len(addrs) > 0 {
			return addrs, minTTL, nil
		}
		if strings.EqualFold(final, name) {
			break
		}
		name = final // chain without addresses: ask for its end
	}
	return nil, none, errNoData
}

// extract follows the CNAME chain starting at name within one answer and
// returns the final name, its addresses of qtype and the smallest TTL of the
// records used.
func extract(in *dns.Msg, name string, qtype uint16) (string, []netip.Addr, uint32) {
	ttl := ^uint32(0)
	for range len(in.Answer) + 1 { // each hop consumes a distinct record
		hop := false
		for _, rr := range in.Answer {
			if c, ok := rr.(*dns.CNAME); ok && strings.EqualFold(c.Hdr.Name, name) {
				name, ttl, hop = c.Target, min(ttl, c.Hdr.Ttl), true
				break
			}
		}
		if !hop {
			break
		}
	}
	var addrs []netip.Addr
	for _, rr := range in.Answer {
		if !strings.EqualFold(rr.Header().Name, name) || rr.Header().Rrtype != qtype {
			continue
		}
		var a netip.Addr
		var ok bool
		switch v := rr.(type) {
		case *dns.A:
			a, ok = netip.AddrFromSlice(v.A.To4())
		case *dns.AAAA:
			a, ok = netip.AddrFromSlice(v.AAAA.To16())
		}
		if a = a.Unmap(); ok && !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
			ttl = min(ttl, rr.Header().Ttl)
		}
	}
	return name, addrs, ttl
}

// exchange sends one question to the servers in order until one answers
// NOERROR or NXDOMAIN.
func (r *Resolver) exchange(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.SetEdns0(1232, false)
	err := errors.New("no servers")
	for _, srv := range r.servers {
		if ctx.Err() != nil { // Close or the refresh budget: stop the walk
			return nil, fmt.Errorf("%s: %w", srv, ctx.Err())
		}
		m.Id = dns.Id()
		qctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
		in, xerr := exchangeConn(qctx, r.udp, m, srv)
		if xerr == nil && in.Truncated {
			in, xerr = exchangeConn(qctx, r.tcp, m, srv)
		}
		cancel()
		switch {
		case xerr != nil:
			err = fmt.Errorf("%s: %w", srv, xerr)
		case in.Rcode == dns.RcodeSuccess || in.Rcode == dns.RcodeNameError:
			return in, nil
		default:
			err = fmt.Errorf("%s: %s", srv, dns.RcodeToString[in.Rcode])
		}
	}
	return nil, err
}

// exchangeConn is dns.Client.ExchangeContext, except that cancelling ctx
// (not only its deadline) ends the exchange: miekg/dns only turns a
// deadline into socket deadlines, so Close would otherwise wait for Timeout.
func exchangeConn(ctx context.Context, c *dns.Client, m *dns.Msg, srv string) (*dns.Msg, error) {
	conn, err := c.DialContext(ctx, srv)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	in, _, err := c.ExchangeWithConnContext(ctx, m, conn)
	if err != nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return in, err
}
