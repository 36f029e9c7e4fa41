package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 {
		var err error
		switch os.Args[1] {
		case "backend":
			err = runBackend(os.Args[2:])
		case "floor":
			err = runFloor(os.Args[2:])
		case "profile":
			err = runProfile(os.Args[2:])
		case "bare":
			err = runBare(os.Args[2:])
		case "tlsload":
			err = runTLSLoad(os.Args[2:])
		case "h3load":
			err = runH3Load(os.Args[2:])
		default:
			err = runRace(os.Args[1:])
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchrace:", err)
			os.Exit(1)
		}
		return
	}
	if err := runRace(nil); err != nil {
		fmt.Fprintln(os.Stderr, "benchrace:", err)
		os.Exit(1)
	}
}

// caseDef is one measured situation.
type caseDef struct {
	Name string `json:"name"`
	Desc string `json:"desc"`
	path string
	// close: a new connection per request (Connection: close).
	close bool
	h2    bool
	// h3: HTTP/3 to the target's QUIC listener (h3load.go), tls set too.
	h3 bool
	// tls: over the target's HTTPS listener (h2 with it: h2load with ALPN
	// h2; without: wrk, which offers no ALPN, so HTTP/1.1). handshake,
	// when set, runs the harness's own TLS load (tlsload.go) instead: a
	// new connection per request with a full handshake ("new") or a
	// resumed one ("resume").
	tls       bool
	handshake string
	// Backend is the backends' kind the case runs against (backendKinds):
	// the same case against each kind is two cases, the second named
	// with its kind (ka-1k, ka-1k.nethttp).
	Backend string `json:"backend"`
	// base is the case's name without its backend's suffix.
	base string
	// pace, when set, is how long each connection waits between a
	// response and its next request (wrk's delay(), whole milliseconds):
	// every proxy serves the same offered rate, well below saturation.
	pace time.Duration
	// only, when set, restricts the case to these targets.
	only []string
}

var cases = []caseDef{
	{Name: "ka-1k", Desc: "keep-alive, 1 KiB, HashCookie (tether)", path: "/hash/1k"},
	{Name: "ka-1k-cookie", Desc: "keep-alive, 1 KiB, Cookie policy (AES-GCM sealed key)", path: "/cookie/1k", only: []string{"tether"}},
	{Name: "ka-1k-paced", Desc: "keep-alive, 1 KiB, HashCookie, each connection waits 3 ms between a response and its next request (wrk's delay()): every proxy serves the same offered rate (about 7,500 req/s here), below saturation, so CPU and latency are compared at one load, not at each proxy's own peak", path: "/hash/1k", pace: 3 * time.Millisecond},
	{Name: "close-1k", Desc: "new connection per request, 1 KiB", path: "/hash/1k", close: true},
	{Name: "ka-64k", Desc: "keep-alive, 64 KiB", path: "/hash/64k"},
	{Name: "h2c-1k", Desc: "HTTP/2 (h2c) client to proxy, 1 KiB, HTTP/1.1 to backends", path: "/hash/1k", h2: true},
	{Name: "h1-tls", Desc: "HTTPS/1.1 keep-alive (wrk), 1 KiB, ECDSA P-256", path: "/hash/1k", tls: true},
	{Name: "h2-tls", Desc: "HTTP/2 over TLS (h2load, ALPN h2), 1 KiB, HTTP/1.1 to backends", path: "/hash/1k", tls: true, h2: true},
	{Name: "h3", Desc: "HTTP/3 (QUIC; quic-go's client as the load, 4 connections × 8 requests in flight, as h2load's for h2-tls), 1 KiB, HTTP/1.1 to backends; HAProxy's and nginx's packages here have no QUIC", path: "/hash/1k", tls: true, h3: true, only: []string{"tether", "caddy"}},
	{Name: "tls-new", Desc: "a new TLS connection per request with a full handshake (TLS 1.3, X25519, ECDSA P-256), 1 KiB", path: "/hash/1k", tls: true, handshake: "new"},
	{Name: "tls-resume", Desc: "a new TLS connection per request, resumed from the previous connection's session ticket (TLS 1.3 PSK with X25519), 1 KiB", path: "/hash/1k", tls: true, handshake: "resume"},
	{Name: "10k-dests", Desc: "keep-alive, 1 KiB, HashCookie, 10,000 destinations", path: "/hash/1k", only: []string{"tether-10k"}},
	{Name: "cluster-3", Desc: "3-node tether cluster, Cookie policy, the client spreads requests over the nodes", path: "/cookie/1k", only: []string{"tether-cluster3"}},
}

// backendKinds are the backends' servers a race can run its cases
// against, each under its own path prefix on every proxy: raw (backend.go:
// a minimal loop whose cost hardly depends on the request head) at the
// paths of the cases, nethttp (net/http's server, with the Date, Server,
// Content-Type and Content-Length fields a real server sends) under "/n".
var backendKinds = []string{"raw", "nethttp"}

// backendPrefix is the path prefix that routes to kind's backends.
func backendPrefix(kind string) string {
	if kind == "nethttp" {
		return "/n"
	}
	return ""
}

// expandCases is every case against each backend kind: the raw one keeps
// the case's name, another kind's is named "<case>.<kind>".
func expandCases(kinds []string) []caseDef {
	var out []caseDef
	for _, c := range cases {
		for _, k := range kinds {
			if k != "raw" && len(c.only) > 0 {
				// tether alone: what these cases measure (sealing, a
				// large cluster, three nodes) is tether's own, whatever
				// answers behind it.
				continue
			}
			x := c
			x.base, x.Backend = c.Name, k
			if k != "raw" {
				x.Name = c.Name + "." + k
				x.path = backendPrefix(k) + c.path
				x.Desc = c.Desc + "; " + k + " backends"
			}
			out = append(out, x)
		}
	}
	return out
}

// selected says whether -cases chose c (by its name or its base name).
func selected(sel []string, c caseDef) bool {
	return len(sel) == 0 || slices.Contains(sel, c.Name) || slices.Contains(sel, c.base)
}

// result is one (round, case, target) measurement.
type result struct {
	Round  int    `json:"round"`
	Case   string `json:"case"`
	Target string `json:"target"`
	loadResult
	CPUusPerReq float64 `json:"cpu_us_per_req"`
	UserUs      float64 `json:"user_us_per_req"`
	SysUs       float64 `json:"sys_us_per_req"`
	Load1       float64 `json:"load1"`
	// LoadUs is the load CPU's (CPU 0: wrk and the backends) busy time per
	// request. With the load CPU saturated, the closed loop's rate and so
	// its latencies are set there, not by the proxy's own CPU.
	LoadUs     float64 `json:"load_cpu_us_per_req"`
	LoadUserUs float64 `json:"load_user_us_per_req"`
	// StealPct and LoadStealPct are the hypervisor's steal time on the
	// proxy CPU and the load CPU during the run, in % of their time: a
	// round with much of it ran on a busy host.
	StealPct     float64 `json:"steal_pct"`
	LoadStealPct float64 `json:"load_steal_pct"`
	// LoadIPIs and ProxyIPIs are the wake-up interrupts (wakeIPIs) the
	// load CPU and the proxy CPU received during the run, per request.
	LoadIPIs  float64 `json:"load_wake_ipis_per_req"`
	ProxyIPIs float64 `json:"proxy_wake_ipis_per_req"`
	// SyscallsPerReq is set with -syscalls.
	SyscallsPerReq float64 `json:"syscalls_per_req,omitempty"`
}

type options struct {
	dur      time.Duration
	rounds   int
	conns    int
	repo     string
	out      bool
	mem      bool
	memConns int
	only     []string
	profile  string
	caseSel  []string
	baseline string
	baseEnv  string
	syscalls bool
	backends []string
	// burst and burstConns: the burst phase (measureBurst).
	burst      bool
	burstConns int
	// maxSteal (%) and stealRetries: see stolen.
	maxSteal     float64
	stealRetries int
}

// stolen reports whether the hypervisor took more than max % of the
// proxy's or the load's CPU during the run (max ≤ 0: never).
func stolen(r result, max float64) bool {
	return max > 0 && (r.StealPct > max || r.LoadStealPct > max)
}

func runRace(args []string) error {
	fs := flag.NewFlagSet("benchrace", flag.ExitOnError)
	var o options
	quick := fs.Bool("quick", false, "smoke check: 1 round of 1 s, 1,000 idle connections, results not written to docs/")
	fs.DurationVar(&o.dur, "duration", 3*time.Second, "length of each load run (whole seconds)")
	fs.IntVar(&o.rounds, "rounds", 3, "interleaved rounds")
	fs.IntVar(&o.conns, "conns", 32, "wrk connections")
	fs.StringVar(&o.repo, "repo", ".", "tether's repository root")
	fs.BoolVar(&o.out, "write", true, "write the generated block of docs/BENCHMARKS.md, docs/img/bench-race.png and the raw figures to bin/bench-race.json")
	fs.BoolVar(&o.mem, "mem", true, "measure resident memory with idle keep-alive client connections")
	fs.IntVar(&o.memConns, "mem-conns", 10000, "idle keep-alive client connections for -mem")
	targetsFlag := fs.String("targets", "", "comma-separated subset of targets (tether, tether-10k, tether-cluster3, stdlib, haproxy, nginx, caddy; bare-nethttp, bare-own, bare-gor, bare-loop, tether-nolog and haproxy-nolog only when named)")
	casesFlag := fs.String("cases", "", "comma-separated subset of cases")
	fs.StringVar(&proxyCPU, "proxy-cpus", proxyCPU, "taskset CPU list of the proxies (the load stays on CPU 0)")
	fs.BoolVar(&o.syscalls, "syscalls", false, "also count the proxy's syscalls per request (perf stat -e raw_syscalls:sys_enter; adds a little cost to each syscall, so not for the CPU figures)")
	fs.StringVar(&o.baseEnv, "baseline-env", "", "environment (KEY=VALUE,...) of tether-base, e.g. -baseline HEAD -baseline-env GOGC=400 to measure a runtime setting")
	fs.StringVar(&o.baseline, "baseline", "", "also race tether built from this git revision, as target tether-base (before/after in one run)")
	fs.StringVar(&o.profile, "profile", "", "instead of the race: profile tether's data path under wrk into this file (ka-1k, or the first of -cases, one that runs on tether: close-1k, ka-64k, h2c-1k, ka-1k-paced); a name ending in .trace gets a runtime trace instead of a CPU profile")
	backendsFlag := fs.String("backends", "raw,nethttp", "the backends' servers every case runs against, comma-separated: raw (a minimal HTTP/1.1 loop whose cost hardly depends on the request head) and nethttp (net/http's server, with Date, Server, Content-Type and Content-Length as real servers send; cases named <case>.nethttp)")
	fs.BoolVar(&o.burst, "burst", true, "measure resident memory after a burst of -burst-conns connections opened at once, each sending one request: 15 s and 60 s after it")
	fs.IntVar(&o.burstConns, "burst-conns", 5000, "connections of the burst phase")
	fs.Float64Var(&o.maxSteal, "max-steal", 3, "a run during which the hypervisor's steal time exceeds this share (%) of the proxy's or the load's CPU is measured again (0: never)")
	fs.IntVar(&o.stealRetries, "steal-retries", 2, "how many times one round of one target is measured again for -max-steal before it is kept as it is")
	fs.Parse(args)
	o.backends = strings.Split(*backendsFlag, ",")
	for _, k := range o.backends {
		if !slices.Contains(backendKinds, k) {
			return fmt.Errorf("-backends: %q is neither raw nor nethttp", k)
		}
	}
	if *quick {
		o.dur, o.rounds, o.out, o.memConns, o.burstConns = time.Second, 1, false, 1000, 1000
	}
	if *targetsFlag != "" {
		o.only = strings.Split(*targetsFlag, ",")
	}
	if *casesFlag != "" {
		o.caseSel = strings.Split(*casesFlag, ",")
	}
	if o.dur < time.Second {
		o.dur = time.Second
	}
	if err := checkSelection(o); err != nil {
		return err // before anything is installed or built
	}
	if o.profile != "" {
		if _, err := profiledCase(o.caseSel); err != nil {
			return err
		}
	}
	if runtime.NumCPU() < 2 {
		return fmt.Errorf("needs 2 CPUs (proxy on CPU 1, load on CPU 0), have %d", runtime.NumCPU())
	}
	// 10,000 client connections, each with a backend side.
	// (The hard limit may be lower than that in a container; the soft one
	// goes up to it.)
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		// The client sides of -mem's connections are this process's,
		// and a proxy holds each one's server side (plus its own).
		if o.mem && lim.Cur < uint64(o.memConns)+fdSpare {
			n := max(int(lim.Cur)-fdSpare, 0)
			logf("descriptor limit %d: -mem-conns %d lowered to %d", lim.Cur, o.memConns, n)
			o.memConns = n
		}
		if o.burst && lim.Cur < uint64(o.burstConns)+fdSpare {
			n := max(int(lim.Cur)-fdSpare, 0)
			logf("descriptor limit %d: -burst-conns %d lowered to %d", lim.Cur, o.burstConns, n)
			o.burstConns = n
		}
	}
	if err := install(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "benchrace-")
	if err != nil {
		return err
	}
	keep := true // a failed run keeps its logs
	defer func() {
		if keep {
			logf("logs kept in %s", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()
	e := &env{dir: dir, secret: filepath.Join(dir, "secret")}
	if err := os.WriteFile(e.secret, []byte("benchrace-cluster-secret-0123456789abcdef"), 0o600); err != nil {
		return err
	}
	if e.self, err = os.Executable(); err != nil {
		return err
	}
	e.tether = filepath.Join(dir, "tether")
	logf("building tether")
	build := exec.Command("go", "build", "-trimpath", "-o", e.tether, "./cmd/tether")
	build.Dir, build.Env = o.repo, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/tether: %w\n%s", err, out)
	}
	if o.baseline != "" {
		src := filepath.Join(dir, "base-src")
		e.tetherBase = filepath.Join(dir, "tether-base")
		logf("building tether at %s", o.baseline)
		script := fmt.Sprintf("mkdir -p %[2]s && git -C %[1]s archive %[3]s | tar -x -C %[2]s && cd %[2]s && CGO_ENABLED=0 go build -trimpath -o %[4]s ./cmd/tether",
			shellQuote(o.repo), shellQuote(src), shellQuote(o.baseline), shellQuote(e.tetherBase))
		if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
			return fmt.Errorf("building tether at %s: %w\n%s", o.baseline, err, out)
		}
	}
	if e.cert, err = writeCert(dir); err != nil {
		return err
	}
	// Every kind's backends run, whichever the cases use: every proxy
	// routes to both.
	for _, kind := range backendKinds {
		be, addrs, err := startProc("backend-"+kind, loadCPU, filepath.Join(dir, "backend-"+kind+".log"), true, nil, e.self, "backend", "-n", "3", "-kind", kind)
		if err != nil {
			return err
		}
		defer be.stop()
		if kind == "raw" {
			e.backends = strings.Split(addrs, ",")
		} else {
			e.nbackends = strings.Split(addrs, ",")
		}
	}
	if o.profile != "" {
		err := profileTether(e, o)
		keep = err != nil
		return err
	}
	targets, err := startTargets(e, o)
	defer func() {
		for _, t := range targets {
			t.stop()
		}
	}()
	if err != nil {
		return err
	}
	rep := &report{Started: time.Now().UTC(), Duration: o.dur.String(), Rounds: o.rounds, Conns: o.conns, Backend: strings.Join(o.backends, " and "), MaxSteal: o.maxSteal,
		Machine: machine(), Versions: versions(e), LoadStart: loadAvg()}
	_, h2err := lookBin("h2load")
	for _, c := range expandCases(o.backends) {
		if !selected(o.caseSel, c) {
			continue
		}
		if c.h2 && h2err != nil {
			logf("skipping %s: h2load (nghttp2-client) is not installed", c.Name)
			continue
		}
		rep.Cases = append(rep.Cases, c)
	}
	if err := race(e, o, targets, rep); err != nil {
		return err
	}
	if o.mem {
		rep.Memory = measureMemory(e, o, targets)
	}
	if o.burst {
		rep.Burst = measureBurst(o, targets)
	}
	rep.LoadEnd = loadAvg()
	rep.Finished = time.Now().UTC()
	rep.summarize()
	fmt.Println(rep.markdown())
	keep = false
	if !o.out {
		return nil
	}
	return rep.write(o.repo)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

// startTargets starts every proxy; a missing tool skips its target.
func startTargets(e *env, o options) ([]*target, error) {
	want := func(n string) bool {
		if strings.HasPrefix(n, "bare-") || strings.HasSuffix(n, "-nolog") { // measuring instruments: only when named
			return slices.Contains(o.only, n)
		}
		return len(o.only) == 0 || slices.Contains(o.only, n)
	}
	var out []*target
	add := func(name string, start func() (*target, error)) error {
		if !want(name) {
			return nil
		}
		logf("starting %s", name)
		t, err := start()
		if err == errSkip {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, t)
		return nil
	}
	steps := []struct {
		name  string
		start func() (*target, error)
	}{
		{"tether", func() (*target, error) { return e.startTether("tether", 1, len(e.backends), true) }},
		{"tether-base", func() (*target, error) {
			if e.tetherBase == "" {
				return nil, errSkip
			}
			var env []string
			if o.baseEnv != "" {
				env = strings.Split(o.baseEnv, ",")
			}
			return e.startTetherBin("tether-base", e.tetherBase, env, 1, len(e.backends), true)
		}},
		{"tether-noloop", func() (*target, error) {
			// The same binary with its own HTTP/1.1 loop off: every
			// connection is net/http's. Only HTTP/1.1, where the loop
			// serves (its h2c listener would race net/http against itself).
			return e.startTetherBin("tether-noloop", e.tether, []string{noLoopEnv}, 1, len(e.backends), false)
		}},
		{"tether-nolog", func() (*target, error) {
			// tether without its access log, for the pair with
			// haproxy-nolog: the same work on both sides, none logged.
			return e.startTetherBin("tether-nolog", e.tether, []string{"TETHER_NO_ACCESS_LOG=true"}, 1, len(e.backends), true)
		}},
		{"stdlib", e.startFloor},
		{"bare-nethttp", func() (*target, error) { return e.startBare("nethttp") }},
		{"bare-own", func() (*target, error) { return e.startBare("own") }},
		{"bare-gor", func() (*target, error) { return e.startBare("gor") }},
		{"bare-loop", func() (*target, error) { return e.startBare("loop") }},
		{"haproxy", func() (*target, error) {
			return withBin("haproxy", func(bin string) (*target, error) { return e.startHAProxy("haproxy", bin, true) })
		}},
		{"haproxy-nolog", func() (*target, error) {
			return withBin("haproxy", func(bin string) (*target, error) { return e.startHAProxy("haproxy-nolog", bin, false) })
		}},
		{"nginx", func() (*target, error) { return withBin("nginx", e.startNginx) }},
		{"caddy", func() (*target, error) { return withBin("caddy", e.startCaddy) }},
		{"tether-10k", func() (*target, error) {
			t, err := e.startTether("tether-10k", 1, 10000, false)
			if t != nil {
				t.pausable = true
			}
			return t, err
		}},
		{"tether-cluster3", func() (*target, error) {
			t, err := e.startTether("tether-cluster3", 3, len(e.backends), false)
			if t != nil {
				t.cookie = "tether_cookie"
				t.pausable = true
			}
			return t, err
		}},
	}
	for _, s := range steps {
		if err := add(s.name, s.start); err != nil {
			return out, err
		}
	}
	return out, nil
}

func withBin(name string, start func(string) (*target, error)) (*target, error) {
	bin, err := lookBin(name)
	if err != nil {
		logf("skipping %s: not installed", name)
		return nil, errSkip
	}
	return start(bin)
}

// applies says whether case c runs on target t.
func applies(c caseDef, t *target) bool {
	if len(c.only) > 0 {
		name := t.name
		if name == "tether-base" {
			name = "tether" // the baseline runs what tether runs
		}
		return slices.Contains(c.only, name)
	}
	if c.tls && t.tls == "" || c.h2 && !c.tls && t.h2 == "" || c.h3 && t.h3 == "" {
		return false
	}
	if c.h2 && t.name == "tether-noloop" {
		return false // HTTP/2 is net/http's in both
	}
	return t.name != "tether-10k" && t.name != "tether-cluster3"
}

// noLoopEnv turns tether's own HTTP/1.1 loop off (the agent's --http1-server).
const noLoopEnv = "TETHER_HTTP1_SERVER=stdlib"

// fdSpare is the descriptors a process keeps beyond -mem's connections
// (listeners, backend connections, logs).
const fdSpare = 1024

// errSkip: a target that this run does not have (tether-base without
// -baseline).
var errSkip = errors.New("skipped")

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// race runs the interleaved rounds.
func race(e *env, o options, targets []*target, rep *report) error {
	ss := newSession()
	for r := range o.rounds {
		for _, c := range rep.Cases {
			var ts []*target
			for _, t := range targets {
				if applies(c, t) {
					ts = append(ts, t)
				}
			}
			// Rotate the order each round, so no proxy always runs
			// right after the same neighbour.
			for i := range ts {
				t := ts[(i+r)%len(ts)]
				alone(targets, t, ss)
				for try := 0; ; try++ {
					res, err := measure(e, o, c, t, ss)
					if err != nil {
						return fmt.Errorf("round %d %s %s: %w", r+1, c.Name, t.name, err)
					}
					res.Round = r + 1
					logf("round %d %-12s %-16s %8.0f req/s  p50 %6.0f µs  p99 %7.0f µs  cpu %5.1f µs/req  load cpu %5.1f (user %4.1f) µs/req  steal %4.1f %% / %4.1f %%  wake IPIs %.3f / %.3f /req  syscalls %.1f/req  errors %d  load %.2f",
						r+1, c.Name, t.name, res.RPS, res.P50us, res.P99us, res.CPUusPerReq, res.LoadUs, res.LoadUserUs, res.StealPct, res.LoadStealPct, res.LoadIPIs, res.ProxyIPIs, res.SyscallsPerReq, res.Errors, res.Load1)
					time.Sleep(300 * time.Millisecond)
					// A run the hypervisor took much of measured the
					// host's other tenants: it is kept aside and run
					// again, up to -steal-retries times.
					if stolen(res, o.maxSteal) && try < o.stealRetries {
						rep.Stolen = append(rep.Stolen, res)
						logf("round %d %s %s: steal above %.1f %%, measured again", r+1, c.Name, t.name, o.maxSteal)
						continue
					}
					rep.Results = append(rep.Results, res)
					break
				}
			}
		}
	}
	return nil
}

// alone pauses every pausable target but t and resumes t if it was
// paused. Their idle work on the proxy CPU was 6–7 % of it (the three
// cluster nodes 40 ms/s, the 10,000-destination node 17 ms/s before its
// watcher stopped walking unchanged health), and in the other targets'
// runs it showed in both p99s, tether's more than HAProxy's. A resumed target is warmed up again (resumeWarm):
// its timers fired at once and a cluster may hold an election.
func alone(targets []*target, t *target, ss *session) {
	for _, x := range targets {
		if x != t && x.pausable && !x.paused {
			x.pause()
		}
	}
	if t.paused {
		t.resume()
		ss.resumed[t.name] = true
	}
}

// resumeWarm is the warm-up of a target that was paused: long enough for
// a cluster's election after its followers' timers fired on resume.
const resumeWarm = 3 * time.Second

// measure runs one case on one target: a second of warm-up, then the
// measured run with the proxy tree's CPU read before and after.
// session is what measure keeps between runs: each target's session
// cookie per path prefix, which (case, target) pairs are warm, and which
// targets were just resumed.
type session struct {
	cookies map[string]string
	warm    map[string]bool
	resumed map[string]bool
}

func newSession() *session {
	return &session{cookies: map[string]string{}, warm: map[string]bool{}, resumed: map[string]bool{}}
}

func measure(e *env, o options, c caseDef, t *target, ss *session) (result, error) {
	cookies := ss.cookies
	prefix := c.path[:strings.LastIndexByte(c.path, '/')]
	key := t.name + prefix
	ck, ok := cookies[key]
	if !ok {
		if t.fixedCookie != "" {
			ck = t.fixedCookie
		} else {
			name := t.cookie
			if strings.HasPrefix(t.name, "tether") {
				// tether_hash, tether_cookie, tether_nhash...: one cluster each
				name = "tether_" + strings.ReplaceAll(prefix[1:], "/", "")
			}
			var err error
			if ck, err = sessionCookie(t.h1+c.path, name); err != nil {
				return result{}, err
			}
		}
		// Every run is on an existing session's path: a request with the
		// cookie gets no new one.
		if err := sessionRouted(t.h1+c.path, ck); err != nil {
			return result{}, err
		}
		cookies[key] = ck
	}
	headers := []string{"Cookie: " + ck}
	if c.close {
		headers = append(headers, "Connection: close")
	}
	urls := []string{t.h1 + c.path}
	switch {
	case c.h3:
		urls = []string{t.h3 + c.path}
	case c.tls:
		urls = []string{t.tls + c.path}
	case c.h2:
		urls = []string{t.h2 + c.path}
	}
	if len(t.clusterH1) > 1 {
		urls = nil
		for _, u := range t.clusterH1 {
			urls = append(urls, u+c.path)
			// The session one node issued must be valid on every node
			// (shared keyring).
			if err := sessionRouted(u+c.path, ck); err != nil {
				return result{}, err
			}
		}
	}
	run := func(dur time.Duration) ([]loadResult, error) {
		out := make([]loadResult, len(urls))
		errs := make(chan error, len(urls))
		for i, u := range urls {
			go func() {
				var err error
				out[i], err = runLoad(e.dir, loadSpec{url: u, conns: max(1, o.conns/len(urls)), dur: dur, headers: headers, h2: c.h2, h3: c.h3, pace: c.pace, handshake: c.handshake, self: e.self})
				errs <- err
			}()
		}
		for range urls {
			if err := <-errs; err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	resumed := ss.resumed[t.name]
	if !ss.warm[key+" "+c.Name] || resumed {
		// Warm-up, once per case and target: backend pools filled, the
		// Go heap grown to its steady size. The proxies keep running
		// between rounds, but for the paused ones (alone), which warm up
		// again.
		warm := time.Second
		if resumed {
			warm = resumeWarm
		}
		if _, err := run(warm); err != nil {
			return result{}, err
		}
		ss.warm[key+" "+c.Name] = true
		delete(ss.resumed, t.name)
	}
	res := result{Case: c.Name, Target: t.name, Load1: loadAvg()}
	var counted chan int64
	if o.syscalls {
		counted = make(chan int64, 1)
		go func() { counted <- countSyscalls(o.dur, tree(allStats(), t.pids()...)) }()
	}
	before, loadBefore, proxyBefore := treeCPU(t.pids()...), cpuStat(loadCPU), cpuStat(proxyCPU)
	loadIPIs, proxyIPIs := wakeIPIs(loadCPU, proxyCPU)
	lrs, err := run(o.dur)
	after, loadAfter, proxyAfter := treeCPU(t.pids()...), cpuStat(loadCPU), cpuStat(proxyCPU)
	loadIPIs2, proxyIPIs2 := wakeIPIs(loadCPU, proxyCPU)
	loadIPIs, proxyIPIs = loadIPIs2-loadIPIs, proxyIPIs2-proxyIPIs
	if err != nil {
		return result{}, err
	}
	// Several load generators (the cluster): requests and rates add up,
	// latencies are the worst generator's.
	for _, lr := range lrs {
		res.Requests += lr.Requests
		res.RPS += lr.RPS
		res.Errors += lr.Errors
		res.Seconds = max(res.Seconds, lr.Seconds)
		res.P50us = max(res.P50us, lr.P50us)
		res.P99us = max(res.P99us, lr.P99us)
	}
	if res.Requests == 0 {
		return res, fmt.Errorf("no request completed")
	}
	if counted != nil {
		if n := <-counted; n >= 0 {
			res.SyscallsPerReq = float64(n) / float64(res.Requests)
		}
	}
	user, sys := after.sub(before).micros()
	res.UserUs, res.SysUs = user/float64(res.Requests), sys/float64(res.Requests)
	res.CPUusPerReq = res.UserUs + res.SysUs
	load := loadAfter.sub(loadBefore)
	lu, ls := load.busy().micros()
	res.LoadUs, res.LoadUserUs = (lu+ls)/float64(res.Requests), lu/float64(res.Requests)
	res.LoadStealPct, res.StealPct = load.stealPct(), proxyAfter.sub(proxyBefore).stealPct()
	res.LoadIPIs, res.ProxyIPIs = float64(loadIPIs)/float64(res.Requests), float64(proxyIPIs)/float64(res.Requests)
	return res, nil
}

func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				model = strings.TrimSpace(l[strings.IndexByte(l, ':')+1:])
				break
			}
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%d CPUs, %s, Linux %s, %s", runtime.NumCPU(), model, strings.TrimSpace(string(kernel)), runtime.Version())
}

func versions(e *env) map[string]string {
	v := map[string]string{}
	first := func(name string, args ...string) {
		bin, err := lookBin(name)
		if err != nil {
			return
		}
		out, _ := command(10*time.Second, bin, args...)
		l := strings.TrimSpace(strings.SplitN(strings.TrimSpace(out), "\n", 2)[0])
		v[name] = l
	}
	first("haproxy", "-v")
	first("nginx", "-v")
	first("caddy", "version")
	first("wrk", "-v")
	first("h2load", "--version")
	if out, err := command(10*time.Second, "git", "-C", ".", "describe", "--always", "--dirty"); err == nil {
		v["tether"] = strings.TrimSpace(out)
	}
	return v
}

var _ = json.Marshal

// checkSelection refuses a name in -cases or -targets that names no case
// or target, which would otherwise run nothing for it without a word (a
// typo such as bare-lop); tether-base and -baseline-env also need
// -baseline, and -baseline-env's entries are KEY=VALUE.
func checkSelection(o options) error {
	var names []string
	for _, c := range expandCases(backendKinds) {
		names = append(names, c.Name)
	}
	for _, n := range o.caseSel {
		if !slices.Contains(names, n) {
			return fmt.Errorf("-cases: no case %q; the cases are %s", n, strings.Join(names, ", "))
		}
	}
	for _, n := range o.only {
		if !slices.Contains(targetOrder, n) {
			return fmt.Errorf("-targets: no target %q; the targets are %s", n, strings.Join(targetOrder, ", "))
		}
		if n == "tether-base" && o.baseline == "" {
			return errors.New("-targets: tether-base is the tree of -baseline, which is not given")
		}
	}
	if o.baseEnv != "" {
		if o.baseline == "" {
			return errors.New("-baseline-env: it is tether-base's environment, and -baseline is not given")
		}
		for _, kv := range strings.Split(o.baseEnv, ",") {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				return fmt.Errorf("-baseline-env: %q is not KEY=VALUE", kv)
			}
		}
	}
	return nil
}
