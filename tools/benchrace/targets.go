package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// target is one running proxy under test.
type target struct {
	name string
	// h1 and h2 are base URLs (http://host:port); h2 is h2c with prior
	// knowledge, "" when the target has none. tls is the HTTPS listener's
	// (https://host:port, HTTP/2 and HTTP/1.1 by ALPN, the harness's
	// certificate), "" when it has none.
	h1, h2, tls string
	// h3 is the HTTP/3 listener's (https://host:port, UDP), "" when the
	// target has none.
	h3 string
	// cookie is the affinity cookie's name; the session's "name=value"
	// is fetched once per path prefix.
	cookie string
	procs  []*proc
	// fixedCookie, when set, is sent as it is (nginx's hash $cookie_…
	// sets no cookie: any value is a session).
	fixedCookie string
	// clusterH1 and admins: every node's proxy and admin URL (tether).
	clusterH1, admins []string
	// pausable: the target's idle work is measurable on the proxy CPU
	// (three Raft nodes' heartbeats and gossip, a change watcher over
	// 10,000 destinations), so it is stopped (SIGSTOP) while another
	// target runs: each proxy alone on its core. paused says it is now.
	pausable, paused bool
}

// pause stops the target's process groups; resume continues them.
func (t *target) pause() { t.signal(syscall.SIGSTOP); t.paused = true }

func (t *target) resume() { t.signal(syscall.SIGCONT); t.paused = false }

func (t *target) signal(sig syscall.Signal) {
	for _, p := range t.procs {
		_ = syscall.Kill(-p.pid(), sig)
	}
}

func (t *target) pids() []int {
	var out []int
	for _, p := range t.procs {
		out = append(out, p.pid())
	}
	return out
}

func (t *target) stop() {
	if t.paused {
		t.resume() // a stopped process takes no SIGTERM
	}
	for _, p := range t.procs {
		p.stop()
	}
}

// env is the harness's run: its directory, binaries and backends.
type env struct {
	dir    string
	tether string // built binary
	// tetherBase is tether built at -baseline, "" without.
	tetherBase string
	self       string // this binary, for its subcommands
	// backends are the raw backends, nbackends the net/http ones (routed
	// under backendPrefix("nethttp") by every proxy).
	backends, nbackends []string
	secret              string
	cert                certFiles // every HTTPS listener's certificate
}

// proxyCPU and loadCPU are the taskset CPU lists; -proxy-cpus changes
// the proxies' (e.g. "0-1" to see a proxy with GOMAXPROCS 2).
var (
	proxyCPU = "1"
	loadCPU  = "0"
)

// tetherConfig is a config with HashCookie under /hash/ and Cookie under
// /cookie/, each to its own cluster over the raw backends, and the same
// under /n/hash/ and /n/cookie/ over the net/http ones; with dests >
// len(backends) the hash clusters have that many destinations, spread over
// the backends. h2 (h2c) and tls (HTTPS, h2 and http/1.1 by ALPN) are
// further listeners when not empty.
func tetherConfig(h1, h2, tls, h3 string, cert certFiles, backends, nbackends []string, dests int) string {
	destsJSON := func(bes []string, n int) string {
		var parts []string
		for i := range n {
			parts = append(parts, fmt.Sprintf(`"d%d": { "Address": "http://%s/" }`, i, bes[i%len(bes)]))
		}
		return strings.Join(parts, ",\n        ")
	}
	listeners := fmt.Sprintf(`{ "Address": %q }`, h1)
	if h2 != "" {
		listeners += fmt.Sprintf(`, { "Address": %q, "Protocols": "Http2" }`, h2)
	}
	if tls != "" {
		listeners += fmt.Sprintf(`, { "Address": %q, "Certificate": { "Path": %q, "KeyPath": %q } }`, tls, cert.cert, cert.key)
	}
	if h3 != "" {
		// A listener of its own: Alt-Svc on the tls listener's answers
		// would change what the TLS cases measure.
		listeners += fmt.Sprintf(`, { "Address": %q, "Protocols": "Http3", "Certificate": { "Path": %q, "KeyPath": %q } }`, h3, cert.cert, cert.key)
	}
	cluster := func(name, policy string, bes []string, n int) string {
		return fmt.Sprintf(`%q: {
        "LoadBalancingPolicy": "RoundRobin",
        "SessionAffinity": { "Enabled": true, "Policy": %q, "AffinityKeyName": "tether_%s" },
        "Destinations": {
        %s
        }
      }`, name, policy, name, destsJSON(bes, n))
	}
	clusters := []string{cluster("hash", "HashCookie", backends, dests), cluster("cookie", "Cookie", backends, len(backends))}
	if len(nbackends) > 0 {
		clusters = append(clusters, cluster("nhash", "HashCookie", nbackends, dests), cluster("ncookie", "Cookie", nbackends, len(nbackends)))
	}
	return fmt.Sprintf(`{
  "Listeners": [ %s ],
  "ReverseProxy": {
    "Routes": {
      "hash":    { "ClusterId": "hash",    "Match": { "Path": "/hash/{**rest}" } },
      "cookie":  { "ClusterId": "cookie",  "Match": { "Path": "/cookie/{**rest}" } },
      "nhash":   { "ClusterId": "nhash",   "Match": { "Path": "/n/hash/{**rest}" } },
      "ncookie": { "ClusterId": "ncookie", "Match": { "Path": "/n/cookie/{**rest}" } }
    },
    "Clusters": {
      %s
    }
  }
}
`, listeners, strings.Join(clusters, ",\n      "))
}

// startTether runs n `tether agent` processes (n > 1: one cluster with
// --bootstrap-expect n) with cfg, each on its own listeners.
func (e *env) startTether(name string, n, dests int, h2 bool) (*target, error) {
	return e.startTetherBin(name, e.tether, nil, n, dests, h2)
}

func (e *env) startTetherBin(name, bin string, env []string, n, dests int, h2 bool) (*target, error) {
	t := &target{name: name, cookie: "tether_hash"}
	var gossips []string
	var firstH1 string
	for i := range n {
		ports, err := freePorts(7)
		if err != nil {
			return nil, err
		}
		h2addr, tlsAddr, h3Addr := "", "", ""
		if h2 {
			h2addr = ports[1]
		}
		if i == 0 {
			tlsAddr, h3Addr = ports[5], ports[6]
		}
		dir := filepath.Join(e.dir, fmt.Sprintf("%s-%d", name, i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		cfg := filepath.Join(dir, "tether.json")
		if err := os.WriteFile(cfg, []byte(tetherConfig(ports[0], h2addr, tlsAddr, h3Addr, e.cert, e.backends, e.nbackends, dests)), 0o600); err != nil {
			return nil, err
		}
		args := []string{bin, "agent", "--config", cfg, "--node-id", fmt.Sprintf("n%d", i+1),
			"--data-dir", filepath.Join(dir, "data"), "--admin-addr", ports[2], "--raft-addr", ports[3],
			"--gossip-addr", ports[4], "--log-level", "warn"}
		if n > 1 {
			args = append(args, "--bootstrap-expect", fmt.Sprint(n), "--cluster-secret-file", e.secret)
			if len(gossips) > 0 {
				args = append(args, "--join", strings.Join(gossips, ","))
			}
		}
		gossips = append(gossips, ports[4])
		// The access log (stdout) goes to a file, as a deployment's would.
		p, _, err := startProc(fmt.Sprintf("%s-%d", name, i), proxyCPU, filepath.Join(dir, "access.log"), false, env, args...)
		if err != nil {
			t.stop()
			return nil, err
		}
		t.procs = append(t.procs, p)
		if i == 0 {
			firstH1 = "http://" + ports[0]
			if h2 {
				t.h2 = "http://" + h2addr
			}
			t.tls, t.h3 = "https://"+tlsAddr, "https://"+h3Addr
		}
		t.clusterH1 = append(t.clusterH1, "http://"+ports[0])
		t.admins = append(t.admins, "http://"+ports[2])
	}
	t.h1 = firstH1
	for _, a := range t.admins {
		if err := waitReady(a+"/readyz", 90*time.Second); err != nil {
			t.stop()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return t, nil
}

// startFloor runs the harness's own stdlib proxy.
func (e *env) startFloor() (*target, error) {
	p, addrs, err := startProc("floor", proxyCPU, filepath.Join(e.dir, "floor.log"), true, nil,
		e.self, "floor", "-backends", strings.Join(e.backends, ","), "-nbackends", strings.Join(e.nbackends, ","),
		"-cert", e.cert.cert, "-key", e.cert.key)
	if err != nil {
		return nil, err
	}
	a := strings.Split(addrs, ",")
	return &target{name: "stdlib", h1: "http://" + a[0], h2: "http://" + a[1], tls: "https://" + a[2], cookie: "floor", procs: []*proc{p}}, nil
}

// startBare runs one of the bare proxies (bare.go, bareloop_linux.go): kind
// is nethttp, own, gor or loop.
func (e *env) startBare(kind string) (*target, error) {
	name := "bare-" + kind
	p, addr, err := startProc(name, proxyCPU, filepath.Join(e.dir, name+".log"), true, nil,
		e.self, "bare", "-server", kind, "-backends", strings.Join(e.backends, ","))
	if err != nil {
		return nil, err
	}
	return &target{name: name, h1: "http://" + addr, fixedCookie: "bare=1", procs: []*proc{p}}, nil
}

// startHAProxy runs HAProxy single-threaded with cookie insert. logged:
// one line per request (option httplog) to its standard output, a file,
// as tether's access log and nginx's are (haproxy); otherwise none
// (haproxy-nolog).
func (e *env) startHAProxy(name, bin string, logged bool) (*target, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	var servers, nservers []string
	for i, b := range e.backends {
		servers = append(servers, fmt.Sprintf("  server s%d %s cookie s%d", i, b, i))
	}
	for i, b := range e.nbackends {
		nservers = append(nservers, fmt.Sprintf("  server n%d %s cookie n%d", i, b, i))
	}
	globalLog, defaultsLog := "", ""
	if logged {
		globalLog = "  log stdout format raw local0"
		defaultsLog = "  log global\n  option httplog"
	}
	cfg := fmt.Sprintf(`global
  nbthread 1
  maxconn 10500
  # A container's hard limit on open files (20,000 here) is below the
  # 2 × maxconn HAProxy reserves; idle client connections need no server
  # side, so run with what there is.
  no strict-limits
%s
defaults
  mode http
%s
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  # tether's default keep-alive timeout, so the burst phase's idle
  # connections stay open past its last reading.
  timeout http-keep-alive 130s
  option http-keep-alive
  option forwardfor
frontend fe
  bind %s
  bind %s proto h2
  bind %s ssl crt %s alpn h2,http/1.1
  use_backend ben if { path_beg /n/ }
  default_backend be
backend be
  balance roundrobin
  cookie SRV insert indirect nocache
  http-reuse always
%s
backend ben
  balance roundrobin
  cookie SRV insert indirect nocache
  http-reuse always
%s
`, globalLog, defaultsLog, ports[0], ports[1], ports[2], e.cert.combined, strings.Join(servers, "\n"), strings.Join(nservers, "\n"))
	path := filepath.Join(e.dir, name+".cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	p, _, err := startProc(name, proxyCPU, filepath.Join(e.dir, name+".log"), false, nil, bin, "-db", "-f", path)
	if err != nil {
		return nil, err
	}
	t := &target{name: name, h1: "http://" + ports[0], h2: "http://" + ports[1], tls: "https://" + ports[2], cookie: "SRV", procs: []*proc{p}}
	return t, waitHTTP(t.h1+"/", 20*time.Second)
}

// startNginx runs nginx with one worker and hash $cookie_ngx consistent.
func (e *env) startNginx(bin string) (*target, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(e.dir, "nginx")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var servers, nservers []string
	for _, b := range e.backends {
		servers = append(servers, fmt.Sprintf("    server %s;", b))
	}
	for _, b := range e.nbackends {
		nservers = append(nservers, fmt.Sprintf("    server %s;", b))
	}
	cfg := fmt.Sprintf(`worker_processes 1;
worker_rlimit_nofile 20000;
daemon off;
user root;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 15000; }
http {
  access_log %[1]s/access.log;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 130s;
  upstream be {
    hash $cookie_ngx consistent;
%[2]s
    keepalive 64;
  }
  upstream ben {
    hash $cookie_ngx consistent;
%[5]s
    keepalive 64;
  }
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
  proxy_buffer_size 16k;
  proxy_buffers 8 16k;
  server {
    listen %[3]s;
    listen %[4]s http2;
    listen %[6]s ssl http2;
    ssl_certificate %[7]s;
    ssl_certificate_key %[8]s;
    ssl_protocols TLSv1.2 TLSv1.3; # 1.22 leaves TLS 1.3 out by default
    location / {
      proxy_pass http://be;
    }
    location /n/ {
      proxy_pass http://ben;
    }
  }
}
`, dir, strings.Join(servers, "\n"), ports[0], ports[1], strings.Join(nservers, "\n"), ports[2], e.cert.cert, e.cert.key)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	p, _, err := startProc("nginx", proxyCPU, filepath.Join(dir, "stderr.log"), false, nil, bin, "-p", dir, "-c", path)
	if err != nil {
		return nil, err
	}
	t := &target{name: "nginx", h1: "http://" + ports[0], h2: "http://" + ports[1], tls: "https://" + ports[2], fixedCookie: "ngx=session-1", procs: []*proc{p}}
	return t, waitHTTP(t.h1+"/", 20*time.Second)
}

// startCaddy runs Caddy with lb_policy cookie, h1 and h2c, and HTTP/3
// on a site of its own (Alt-Svc would change what the TLS cases measure).
// default_sni: Go's client (h3load) sends no SNI for an IP address.
func (e *env) startCaddy(bin string) (*target, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	routes := fmt.Sprintf(`	handle /n/* {
		reverse_proxy %s {
			lb_policy cookie caddy_lb
		}
	}
	handle {
		reverse_proxy %s {
			lb_policy cookie caddy_lb
		}
	}`, strings.Join(e.nbackends, " "), strings.Join(e.backends, " "))
	cfg := fmt.Sprintf(`{
	admin off
	auto_https off
	default_sni 127.0.0.1
	servers :%[7]s {
		protocols h1 h2 h3
	}
	servers {
		protocols h1 h2 h2c
	}
}
http://%[1]s {
%[3]s
}
https://%[2]s {
	tls %[4]s %[5]s
%[3]s
}
https://%[6]s {
	tls %[4]s %[5]s
%[3]s
}
`, ports[0], ports[1], routes, e.cert.cert, e.cert.key, ports[2], portOf(ports[2]))
	path := filepath.Join(e.dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	p, _, err := startProc("caddy", proxyCPU, filepath.Join(e.dir, "caddy.log"), false,
		[]string{"HOME=" + e.dir, "XDG_DATA_HOME=" + e.dir, "XDG_CONFIG_HOME=" + e.dir},
		bin, "run", "--adapter", "caddyfile", "--config", path)
	if err != nil {
		return nil, err
	}
	t := &target{name: "caddy", h1: "http://" + ports[0], h2: "http://" + ports[0], tls: "https://" + ports[1], h3: "https://" + ports[2], cookie: "caddy_lb", procs: []*proc{p}}
	return t, waitHTTP(t.h1+"/", 30*time.Second)
}

func getStatus(url string) (int, error) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// waitReady polls a /readyz until it answers 200.
func waitReady(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := getStatus(url)
		if err == nil && st == 200 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %v (last: %d %v)", url, timeout, st, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// portOf is the port of a host:port address.
func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}
