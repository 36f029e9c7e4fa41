// Command benchrace is `make bench-race`: tether measured side by side with
// HAProxy, nginx, Caddy and a bare net/http/httputil.ReverseProxy (the
// standard library's floor) on one machine, with the same backends, the
// same cookie affinity and the same load.
//
// Each proxy runs alone on CPU 1 (taskset); wrk, h2load and the backends run
// on CPU 0. Cases run in interleaved rounds (every proxy once per case per
// round, in an order that rotates between rounds), so a change in the
// machine's load hits every proxy alike. The figures are requests/s, p50
// and p99 latency and the proxy's CPU time per request from /proc (utime +
// stime of the whole process tree: nginx's and HAProxy's workers are
// counted), each as min/median/max over the rounds, with the load CPU's
// busy time, both CPUs' steal time and the wake-up interrupts each CPU
// received per request (a proxy that is the loop's bottleneck makes the
// load CPU sleep between its writes, and each wake-up costs it an exit to
// the hypervisor here). Most cases are closed loops run at each proxy's
// own peak; ka-1k-paced paces every connection (wrk's delay()) so that all
// proxies serve one offered rate.
//
// tether-noloop is the same tether binary with its own HTTP/1.1 server loop
// off (every connection net/http's), in the HTTP/1.1 cases every proxy
// runs: the report pairs tether's CPU per request with it round by round,
// and the memory phase (-mem: that many idle keep-alive connections, each
// after one request, resident memory before and after) gives an idle
// connection's cost with the loop and without it, beside HAProxy's.
//
// Every proxy also serves HTTPS (HTTP/2 and HTTP/1.1 by ALPN) with one
// ECDSA P-256 certificate the harness makes: h1-tls runs wrk over it,
// h2-tls h2load, and tls-new and tls-resume the harness's own TLS client
// (the tlsload subcommand: a connection per request, each a full or a
// resumed handshake). tether and Caddy also serve HTTP/3 on a port of its
// own: h3 runs quic-go's client against it (the h3load subcommand; h2load
// here speaks no HTTP/3, and HAProxy's and nginx's packages no QUIC).
// Every case runs against two kinds of backends (raw
// and net/http, -backends; h3, raw only), and the burst phase (-burst) opens
// -burst-conns connections at once, each sending one request, and reads
// the proxies' resident memory 15 s and 60 s after.
//
// The harness rewrites the block between markers in docs/BENCHMARKS.md (the
// table of the current figures) and the chart docs/img/bench-race.png, and
// writes the raw per-round figures to bin/bench-race.json. Its subcommands
// (backend, floor, profile, tlsload, h3load) are the processes it starts; they are not meant
// to be run by hand.
package main
