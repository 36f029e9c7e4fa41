package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// memResult is a target's resident memory, idle and with idle keep-alive
// client connections open.
type memResult struct {
	Target    string `json:"target"`
	Conns     int    `json:"conns"`
	Opened    int    `json:"opened"`
	IdleRSS   int64  `json:"idle_rss_kib"`
	IdlePSS   int64  `json:"idle_pss_kib"`
	LoadedRSS int64  `json:"rss_kib"`
	LoadedPSS int64  `json:"pss_kib"`
}

// measureMemory opens o.memConns keep-alive connections to each target,
// sends one request on each (so each is a served, idle keep-alive
// connection with its backend side pooled), and reads the process tree's
// Rss and Pss while they are all open.
func measureMemory(e *env, o options, targets []*target) []memResult {
	var out []memResult
	for _, t := range targets {
		if t.name == "tether-10k" || t.name == "tether-cluster3" {
			continue
		}
		m, err := memoryOf(t, o.memConns)
		if err != nil {
			logf("memory %s: %v", t.name, err)
			continue
		}
		logf("memory %-8s idle rss %6d KiB, %d conns rss %7d KiB pss %7d KiB", t.name, m.IdleRSS, m.Opened, m.LoadedRSS, m.LoadedPSS)
		out = append(out, m)
	}
	return out
}

// memoryOf measures t idle (after the race) and with n idle connections.
// A garbage-collected proxy's growth also holds what the connections' first
// requests left for the collector: a heap that the race left below its goal
// grows by it, one already at its goal reuses its room.
func memoryOf(t *target, n int) (memResult, error) {
	m := memResult{Target: t.name, Conns: n}
	m.IdleRSS, m.IdlePSS = treeMemory(t.pids()...)
	u, err := url.Parse(t.h1)
	if err != nil {
		return m, err
	}
	ck := t.fixedCookie
	if ck == "" {
		if ck, err = sessionCookie(t.h1+"/hash/1k", t.cookie); err != nil {
			return m, err
		}
	}
	req := []byte("GET /hash/1k HTTP/1.1\r\nHost: " + u.Host + "\r\nCookie: " + ck + "\r\n\r\n")
	conns, opened, err := openIdle(u.Host, req, n)
	defer closeAll(conns)
	m.Opened = opened
	if err != nil {
		return m, err
	}
	time.Sleep(2 * time.Second) // let the proxy settle (GC, idle timers)
	m.LoadedRSS, m.LoadedPSS = treeMemory(t.pids()...)
	return m, nil
}

// openIdle opens n connections to host, 32 at a time, each served req
// once and left open; an error when not all of them could be.
func openIdle(host string, req []byte, n int) ([]net.Conn, int, error) {
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	work := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				c, err := keepAliveRequest(host, req)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				conns[i] = c
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	opened := 0
	for _, c := range conns {
		if c != nil {
			opened++
		}
	}
	if opened < n {
		return conns, opened, fmt.Errorf("%d of %d connections opened: %v", opened, n, firstErr)
	}
	return conns, opened, nil
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}

// keepAliveRequest dials host, sends req and reads one response whole,
// leaving the connection open and idle.
func keepAliveRequest(host string, req []byte) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", host, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(req); err != nil {
		c.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 4096), nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		c.Close()
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// profileTether runs tether's data path (the profile subcommand) on CPU 1
// under wrk's ka-1k load (or h2load's, for h2c-1k) and writes its CPU
// profile to o.profile.
func profileTether(e *env, o options) error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	cfg := e.dir + "/profile.json"
	if err := os.WriteFile(cfg, []byte(tetherConfig(ports[0], ports[1], ports[2], "", e.cert, e.backends, e.nbackends, len(e.backends))), 0o600); err != nil {
		return err
	}
	p, _, err := startProc("profile", proxyCPU, e.dir+"/profile.log", true, nil,
		e.self, "profile", "-config", cfg, "-access-log", e.dir+"/profile-access.log", "-o", o.profile)
	if err != nil {
		return err
	}
	defer p.stop()
	t := &target{name: "tether", h1: "http://" + ports[0], h2: "http://" + ports[1], tls: "https://" + ports[2], cookie: "tether_hash", procs: []*proc{p}}
	c, err := profiledCase(o.caseSel)
	if err != nil {
		return err
	}
	ss := newSession()
	syscall.Kill(p.pid(), syscall.SIGUSR1)
	res, err := measure(e, o, c, t, ss)
	syscall.Kill(p.pid(), syscall.SIGUSR2)
	if err != nil {
		return err
	}
	time.Sleep(time.Second)
	logf("profiled %s: %.0f req/s, p50 %.0f µs, p99 %.0f µs, cpu %.1f µs/req (profiler on) -> %s", c.Name, res.RPS, res.P50us, res.P99us, res.CPUusPerReq, o.profile)
	return nil
}

// profiledCase is the case -profile runs: ka-1k, or the first of -cases,
// which must be one the profile's HashCookie listeners serve (HTTP/1.1,
// and h2c for h2c-1k); a case of other targets or an unknown name is
// refused rather than profiled as ka-1k.
func profiledCase(sel []string) (caseDef, error) {
	if len(sel) == 0 {
		return expandCases([]string{"raw"})[0], nil
	}
	var served []string
	all := expandCases(backendKinds)
	for _, c := range all {
		if c.only == nil {
			served = append(served, c.Name)
		}
	}
	for _, c := range all {
		if c.Name != sel[0] {
			continue
		}
		if c.only != nil {
			return caseDef{}, fmt.Errorf("-profile: case %s needs a target of its own (%s), not the profiled tether's HashCookie listeners; profile one of %s", c.Name, strings.Join(c.only, ", "), strings.Join(served, ", "))
		}
		return c, nil
	}
	return caseDef{}, fmt.Errorf("-profile: no case %q; profile one of %s", sel[0], strings.Join(served, ", "))
}

// burstResult is a target's resident memory around a burst: n client
// connections opened at once, each sending one request and then staying
// open, idle.
type burstResult struct {
	Target string `json:"target"`
	Conns  int    `json:"conns"`
	Opened int    `json:"opened"`
	// IdleRSS is before the burst; At15RSS and At60RSS 15 s and 60 s after
	// its last response (KiB, whole process tree).
	IdleRSS int64 `json:"idle_rss_kib"`
	PeakRSS int64 `json:"peak_rss_kib"`
	At15RSS int64 `json:"rss_15s_kib"`
	At60RSS int64 `json:"rss_60s_kib"`
	// BurstSecs is how long the burst took, from the first dial to the
	// last response.
	BurstSecs float64 `json:"burst_seconds"`
}

// burstAfter are the moments after a burst at which its memory is read.
var burstAfter = [2]time.Duration{15 * time.Second, 60 * time.Second}

// measureBurst runs the burst on each target in turn; each target's
// readings run in the background while the next target's burst goes on, as
// many targets at once as this process's descriptors allow it to hold the
// connections of (each target's are closed after its last reading).
func measureBurst(o options, targets []*target) []burstResult {
	var out []*burstResult
	var wg sync.WaitGroup
	held := make(chan struct{}, burstsAtOnce(o.burstConns))
	for _, t := range targets {
		if t.name == "tether-10k" || t.name == "tether-cluster3" {
			continue
		}
		u, err := url.Parse(t.h1)
		if err != nil {
			continue
		}
		ck := t.fixedCookie
		if ck == "" {
			name := t.cookie
			if strings.HasPrefix(t.name, "tether") {
				name = "tether_nhash"
			}
			if ck, err = sessionCookie(t.h1+"/n/hash/1k", name); err != nil {
				logf("burst %s: %v", t.name, err)
				continue
			}
		}
		// To the net/http backends: what a deployment's answer.
		req := []byte("GET /n/hash/1k HTTP/1.1\r\nHost: " + u.Host + "\r\nCookie: " + ck + "\r\n\r\n")
		held <- struct{}{}
		res := &burstResult{Target: t.name, Conns: o.burstConns}
		res.IdleRSS, _ = treeMemory(t.pids()...)
		stop := make(chan struct{})
		peak := make(chan int64, 1)
		go func() { peak <- peakRSS(t, stop) }()
		start := time.Now()
		conns, opened := burst(u.Host, req, o.burstConns)
		done := time.Now()
		close(stop)
		res.PeakRSS, res.Opened, res.BurstSecs = <-peak, opened, done.Sub(start).Seconds()
		logf("burst %-8s %d of %d connections served in %.1f s; rss idle %d KiB, peak %d KiB", t.name, opened, o.burstConns, res.BurstSecs, res.IdleRSS, res.PeakRSS)
		out = append(out, res)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { closeAll(conns); <-held }()
			for k, d := range burstAfter {
				time.Sleep(time.Until(done.Add(d)))
				rss, _ := treeMemory(t.pids()...)
				if k == 0 {
					res.At15RSS = rss
				} else {
					res.At60RSS = rss
				}
			}
			logf("burst %-8s rss +15 s %d KiB (%.1f KiB/conn), +60 s %d KiB (%.1f KiB/conn)", res.Target, res.At15RSS, res.perConn(res.At15RSS), res.At60RSS, res.perConn(res.At60RSS))
		}()
	}
	wg.Wait()
	var rs []burstResult
	for _, r := range out {
		rs = append(rs, *r)
	}
	return rs
}

// burstsAtOnce is how many targets' burst connections this process can
// hold at once within its descriptor limit (at least one).
func burstsAtOnce(conns int) int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || conns <= 0 {
		return 1
	}
	return max(1, int((int64(lim.Cur)-fdSpare)/int64(conns)))
}

// perConn is the growth over the idle figure per connection (KiB).
func (b burstResult) perConn(rss int64) float64 {
	return float64(rss-b.IdleRSS) / float64(max(1, b.Opened))
}

// peakRSS samples t's resident memory every 100 ms until stop closes and
// returns the largest.
func peakRSS(t *target, stop <-chan struct{}) int64 {
	var peak int64
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if rss, _ := treeMemory(t.pids()...); rss > peak {
			peak = rss
		}
		select {
		case <-stop:
			return peak
		case <-tick.C:
		}
	}
}

// burst dials n connections to host at once (every dial started before
// any request is sent waits, so they arrive together), sends req on each
// as soon as it is connected and reads its response; the connections stay
// open. It returns them and how many were served.
func burst(host string, req []byte, n int) ([]net.Conn, int) {
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			c, err := keepAliveRequest(host, req)
			if err == nil {
				conns[i] = c
			}
		}()
	}
	close(gate)
	wg.Wait()
	opened := 0
	for _, c := range conns {
		if c != nil {
			opened++
		}
	}
	return conns, opened
}
