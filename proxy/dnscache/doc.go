// Package dnscache resolves destination host names for the data path
// (SPEC §2.1): names are resolved by the proxy and cached for the record's
// TTL, the last known good addresses stay in use when a lookup fails, and a
// change of address takes effect for new connections.
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
//  4. DNS: once an entry is stale the next caller refreshes it and waits for
//     the answer (so a new address is used from the first connection after
//     the TTL). Concurrent callers for one host share a single query. If the
//     refresh fails (timeout, SERVFAIL, NXDOMAIN, no records) the last known
//     good addresses keep being served, one Warn line is logged per failure
//     streak, and the next attempt waits NegativeTTL. A name that has never
//     resolved returns "resolve <host>: ..." and that failure is also cached
//     for NegativeTTL.
//
// Search domains: the name is always tried fully qualified first; only if
// that answers NXDOMAIN or no records are the search domains appended in
// order (never for a name with a trailing dot). A timeout or server failure stops the walk, so a flaky server does
// not turn into a lookup of the wrong name. ndots is ignored on purpose
// (fully-qualified first avoids the ndots:5 query storm in Kubernetes).
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
// Cache entries are never evicted: destination names come from the
// configuration, so the set is small.
package dnscache
