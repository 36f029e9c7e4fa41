// Package dnscache resolves destination host names for the data path
// (proxy/DESIGN.md, "Routes and load balancing"): names are resolved by the
// proxy and cached for the record's TTL, the last known good addresses stay
// in use when a lookup fails, and a change of address takes effect for new
// connections.
//
// A Resolver queries A and AAAA records with github.com/miekg/dns so the
// TTLs are visible (the standard library hides them). Resolution order for
// a host:
//
//  1. IP literals (v4, or v6 with an optional zone) are used as they are.
//  2. Names in the hosts file (default /etc/hosts) win over DNS. The file is
//     re-read when its modification time or size changes, checked at most
//     every HostsCheckInterval; its entries never expire on their own.
//  3. The cache: an entry is used until its expiry, which is the smallest TTL
//     in the answer (CNAME records of the chain included), clamped to
//     [MinTTL, MaxTTL].
//  4. DNS, stale while revalidate: a caller that finds an expired entry
//     with addresses gets those addresses at once and starts a background
//     refresh; so a changed address is used from the first connection after
//     that refresh has completed, not from the first one after the TTL (a
//     DNS outage then never stalls a connection). At most one refresh per
//     host is in flight, and it is bounded by Timeout × servers × (1 +
//     search domains). Only a host with no addresses at all (first lookup,
//     or only failures so far) makes callers wait; concurrent callers share
//     that single query. If a refresh fails (timeout, SERVFAIL, NXDOMAIN, no
//     records) the last known good addresses keep being served, one Warn
//     line is logged per failure streak, and the next attempt waits
//     NegativeTTL. A name that has never resolved returns
//     "resolve <host>: ..." and that failure is also cached for NegativeTTL.
//
// Close cancels refreshes in flight (the query is abandoned, not waited
// out) and waits for their goroutines; afterwards nothing queries DNS.
//
// Search domains: the name is always tried fully qualified first; only if
// that answers NXDOMAIN or no records are the search domains appended in
// order (never for a name with a trailing dot). A timeout or server
// failure stops the walk, so a flaky server does not turn into a lookup of
// the wrong name. ndots is ignored on purpose (fully-qualified first avoids
// the ndots:5 query storm in Kubernetes).
// Search domains default to those in /etc/resolv.conf only when the servers
// come from it too. CNAME chains in an answer are followed to the final
// name; if the server returned the chain without addresses, the final name
// is queried again (a bounded number of times).
//
// Servers are tried in order; a truncated UDP answer is retried over TCP.
// A and AAAA are queried in parallel; either one answering is enough.
//
// DialContext (fits http.Transport.DialContext) picks addresses round-robin
// per host and on a dial error tries the next one, at most once per address.
// Addresses are filtered by the network ("tcp4" dials only IPv4 ones).
// Eviction: destination names come from the configuration, but the
// configuration changes, so an entry not looked up for 10 × MaxTTL is
// dropped. Lookups sweep the cache at most once per MaxTTL, which keeps the
// cost amortised and needs no goroutine of its own. Warm looks a
// configuration's names up before their first request (warm.go).
package dnscache
