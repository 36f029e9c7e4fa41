package main

import (
	"fmt"
	"io"
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
	// knowledge, "" when the target has none.
	h1, h2 string
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
	backends   []string
	secret     string
}

// proxyCPU and loadCPU are the taskset CPU lists; -proxy-cpus changes
// the proxies' (e.g. "0-1" to see a proxy with GOMAXPROCS 2).
var (
	proxyCPU = "1"
	loadCPU  = "0"
)

// tetherConfig is a config with HashCookie under /hash/ and Cookie under
// /cookie/, each to its own cluster over the same backends; with dests >
// len(backends) the hash cluster has that many destinations, spread over
// the backends.
func tetherConfig(h1, h2 string, backends []string, dests int) string {
	destsJSON := func(n int) string {
		var parts []string
		for i := range n {
			parts = append(parts, fmt.Sprintf(`"d%d": { "Address": "http://%s/" }`, i, backends[i%len(backends)]))
		}
		return strings.Join(parts, ",\n        ")
	}
	listeners := fmt.Sprintf(`{ "Address": %q }`, h1)
	if h2 != "" {
		listeners += fmt.Sprintf(`, { "Address": %q, "Protocols": "Http2" }`, h2)
	}
	return fmt.Sprintf(`{
  "Listeners": [ %s ],
  "ReverseProxy": {
    "Routes": {
      "hash":   { "ClusterId": "hash",   "Match": { "Path": "/hash/{**rest}" } },
      "cookie": { "ClusterId": "cookie", "Match": { "Path": "/cookie/{**rest}" } }
    },
    "Clusters": {
      "hash": {
        "LoadBalancingPolicy": "RoundRobin",
        "SessionAffinity": { "Enabled": true, "Policy": "HashCookie", "AffinityKeyName": "tether_hash" },
        "Destinations": {
        %s
        }
      },
      "cookie": {
        "LoadBalancingPolicy": "RoundRobin",
        "SessionAffinity": { "Enabled": true, "Policy": "Cookie", "AffinityKeyName": "tether_cookie" },
        "Destinations": {
        %s
        }
      }
    }
  }
}
`, listeners, destsJSON(dests), destsJSON(len(backends)))
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
		ports, err := freePorts(5)
		if err != nil {
			return nil, err
		}
		h2addr := ""
		if h2 {
			h2addr = ports[1]
		}
		dir := filepath.Join(e.dir, fmt.Sprintf("%s-%d", name, i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		cfg := filepath.Join(dir, "tether.json")
		if err := os.WriteFile(cfg, []byte(tetherConfig(ports[0], h2addr, e.backends, dests)), 0o600); err != nil {
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
		e.self, "floor", "-backends", strings.Join(e.backends, ","))
	if err != nil {
		return nil, err
	}
	a := strings.Split(addrs, ",")
	return &target{name: "stdlib", h1: "http://" + a[0], h2: "http://" + a[1], cookie: "floor", procs: []*proc{p}}, nil
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

// startHAProxy runs HAProxy single-threaded with cookie insert.
func (e *env) startHAProxy(bin string) (*target, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	var servers []string
	for i, b := range e.backends {
		servers = append(servers, fmt.Sprintf("  server s%d %s cookie s%d", i, b, i))
	}
	cfg := fmt.Sprintf(`global
  nbthread 1
  maxconn 10500
  # A container's hard limit on open files (20,000 here) is below the
  # 2 × maxconn HAProxy reserves; idle client connections need no server
  # side, so run with what there is.
  no strict-limits
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  timeout http-keep-alive 60s
  option http-keep-alive
  option forwardfor
frontend fe
  bind %s
  bind %s proto h2
  default_backend be
backend be
  balance roundrobin
  cookie SRV insert indirect nocache
  http-reuse always
%s
`, ports[0], ports[1], strings.Join(servers, "\n"))
	path := filepath.Join(e.dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	p, _, err := startProc("haproxy", proxyCPU, filepath.Join(e.dir, "haproxy.log"), false, nil, bin, "-db", "-f", path)
	if err != nil {
		return nil, err
	}
	t := &target{name: "haproxy", h1: "http://" + ports[0], h2: "http://" + ports[1], cookie: "SRV", procs: []*proc{p}}
	return t, waitHTTP(t.h1+"/", 20*time.Second)
}

// startNginx runs nginx with one worker and hash $cookie_ngx consistent.
func (e *env) startNginx(bin string) (*target, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(e.dir, "nginx")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var servers []string
	for _, b := range e.backends {
		servers = append(servers, fmt.Sprintf("    server %s;", b))
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
  keepalive_timeout 60s;
  upstream be {
    hash $cookie_ngx consistent;
%[2]s
    keepalive 64;
  }
  server {
    listen %[3]s;
    listen %[4]s http2;
    location / {
      proxy_pass http://be;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_buffer_size 16k;
      proxy_buffers 8 16k;
    }
  }
}
`, dir, strings.Join(servers, "\n"), ports[0], ports[1])
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	p, _, err := startProc("nginx", proxyCPU, filepath.Join(dir, "stderr.log"), false, nil, bin, "-p", dir, "-c", path)
	if err != nil {
		return nil, err
	}
	t := &target{name: "nginx", h1: "http://" + ports[0], h2: "http://" + ports[1], fixedCookie: "ngx=session-1", procs: []*proc{p}}
	return t, waitHTTP(t.h1+"/", 20*time.Second)
}

// startCaddy runs Caddy with lb_policy cookie, h1 and h2c.
func (e *env) startCaddy(bin string) (*target, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`{
	admin off
	auto_https off
	servers {
		protocols h1 h2c
	}
}
http://%s {
	reverse_proxy %s {
		lb_policy cookie caddy_lb
	}
}
`, ports[0], strings.Join(e.backends, " "))
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
	t := &target{name: "caddy", h1: "http://" + ports[0], h2: "http://" + ports[0], cookie: "caddy_lb", procs: []*proc{p}}
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
