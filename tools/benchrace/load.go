package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// loadResult is one load generator run's figures.
type loadResult struct {
	Requests int64   `json:"requests"`
	Seconds  float64 `json:"seconds"`
	RPS      float64 `json:"rps"`
	P50us    float64 `json:"p50_us"`
	P99us    float64 `json:"p99_us"`
	// Errors: non-2xx/3xx responses and socket errors (wrk), failed and
	// errored requests (h2load).
	Errors int64 `json:"errors"`
}

var (
	wrkTotal  = regexp.MustCompile(`(?m)^\s*(\d+) requests in ([0-9.]+)(us|ms|s|m|h),`)
	wrkRPS    = regexp.MustCompile(`(?m)^Requests/sec:\s+([0-9.]+)`)
	wrkPct    = regexp.MustCompile(`(?m)^\s+(50|99)(?:\.0+)?%\s+([0-9.]+)(us|ms|s|m|h)\s*$`)
	wrkNon2xx = regexp.MustCompile(`(?m)^\s*Non-2xx or 3xx responses: (\d+)`)
	wrkSock   = regexp.MustCompile(`(?m)^\s*Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

// unitMicros converts one of wrk's time units to microseconds.
func unitMicros(v float64, unit string) float64 {
	switch unit {
	case "us":
		return v
	case "ms":
		return v * 1e3
	case "s":
		return v * 1e6
	case "m":
		return v * 60e6
	case "h":
		return v * 3600e6
	}
	return v
}

// parseWrk reads the output of `wrk --latency`.
func parseWrk(out string) (loadResult, error) {
	var r loadResult
	m := wrkTotal.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("wrk output has no 'N requests in' line:\n%s", out)
	}
	r.Requests, _ = strconv.ParseInt(m[1], 10, 64)
	secs, _ := strconv.ParseFloat(m[2], 64)
	r.Seconds = unitMicros(secs, m[3]) / 1e6
	if m := wrkRPS.FindStringSubmatch(out); m != nil {
		r.RPS, _ = strconv.ParseFloat(m[1], 64)
	} else if r.Seconds > 0 {
		r.RPS = float64(r.Requests) / r.Seconds
	}
	for _, m := range wrkPct.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		switch m[1] {
		case "50":
			r.P50us = unitMicros(v, m[3])
		case "99":
			r.P99us = unitMicros(v, m[3])
		}
	}
	if r.P50us == 0 || r.P99us == 0 {
		return r, fmt.Errorf("wrk output has no 50%%/99%% latency (run with --latency):\n%s", out)
	}
	if m := wrkNon2xx.FindStringSubmatch(out); m != nil {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		r.Errors += n
	}
	if m := wrkSock.FindStringSubmatch(out); m != nil {
		for _, s := range m[1:] {
			n, _ := strconv.ParseInt(s, 10, 64)
			r.Errors += n
		}
	}
	return r, nil
}

var (
	h2Finished = regexp.MustCompile(`(?m)^finished in ([0-9.]+)(us|ms|s), ([0-9.]+) req/s`)
	h2Requests = regexp.MustCompile(`(?m)^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored`)
)

// parseH2load reads h2load's summary and its --log-file (per request:
// start µs, status, duration µs; tab-separated) for the percentiles.
func parseH2load(out string, log []byte) (loadResult, error) {
	var r loadResult
	m := h2Finished.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("h2load output has no 'finished in' line:\n%s", out)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	r.Seconds = unitMicros(v, m[2]) / 1e6
	r.RPS, _ = strconv.ParseFloat(m[3], 64)
	q := h2Requests.FindStringSubmatch(out)
	if q == nil {
		return r, fmt.Errorf("h2load output has no 'requests:' line:\n%s", out)
	}
	r.Requests, _ = strconv.ParseInt(q[4], 10, 64)
	failed, _ := strconv.ParseInt(q[5], 10, 64)
	errored, _ := strconv.ParseInt(q[6], 10, 64)
	r.Errors = failed + errored
	var durs []float64
	sc := bufio.NewScanner(bytes.NewReader(log))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) < 3 {
			continue
		}
		status, _ := strconv.Atoi(f[1])
		if status < 200 || status >= 400 {
			continue
		}
		d, err := strconv.ParseFloat(f[2], 64)
		if err == nil {
			durs = append(durs, d)
		}
	}
	if len(durs) == 0 {
		return r, fmt.Errorf("h2load log has no successful request")
	}
	slices.Sort(durs)
	r.P50us, r.P99us = percentile(durs, 50), percentile(durs, 99)
	return r, nil
}

// percentile of sorted values, nearest rank.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// loadSpec is one load run.
type loadSpec struct {
	url     string
	conns   int
	dur     time.Duration
	headers []string
	h2      bool
	h3      bool          // runs h3load (self's subcommand)
	pace    time.Duration // wrk only: see caseDef.pace
	// handshake: "new" or "resume" runs tlsload (self's subcommand)
	// instead of wrk: a TLS connection per request.
	handshake string
	self      string
}

// runLoad runs wrk (or h2load) on CPU 0 and returns its figures.
func runLoad(dir string, s loadSpec) (loadResult, error) {
	if s.h2 && s.pace > 0 {
		return loadResult{}, fmt.Errorf("a paced case runs wrk, not h2load: pace %v with h2", s.pace)
	}
	if s.h3 {
		args := []string{"-c", "0", s.self, "h3load", "-url", s.url, "-conns", strconv.Itoa(max(1, s.conns/8)), "-m", "8", "-d", s.dur.String()}
		for _, h := range s.headers {
			args = append(args, "-H", h)
		}
		out, err := command(s.dur+30*time.Second, "taskset", args...)
		if err != nil {
			return loadResult{}, fmt.Errorf("h3load: %w\n%s", err, out)
		}
		var r loadResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			return loadResult{}, fmt.Errorf("h3load output: %w\n%s", err, out)
		}
		return r, nil
	}
	if s.handshake != "" {
		args := []string{"-c", "0", s.self, "tlsload", "-url", s.url, "-c", strconv.Itoa(s.conns), "-d", s.dur.String()}
		if s.handshake == "resume" {
			args = append(args, "-resume")
		}
		for _, h := range s.headers {
			args = append(args, "-H", h)
		}
		out, err := command(s.dur+30*time.Second, "taskset", args...)
		if err != nil {
			return loadResult{}, fmt.Errorf("tlsload: %w\n%s", err, out)
		}
		var r tlsloadResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			return loadResult{}, fmt.Errorf("tlsload output: %w\n%s", err, out)
		}
		return r.loadResult, nil
	}
	if s.h2 {
		logf := dir + "/h2load-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".log"
		defer os.Remove(logf)
		// 4 connections × 8 concurrent streams = 32 requests in flight,
		// as wrk's 32 connections.
		args := []string{"-c", "0", "h2load", "-t", "1", "-c", "4", "-m", "8",
			"-D", strconv.Itoa(int(s.dur.Seconds())), "--log-file=" + logf}
		for _, h := range s.headers {
			args = append(args, "-H", h)
		}
		args = append(args, s.url)
		out, err := command(s.dur+30*time.Second, "taskset", args...)
		if err != nil {
			return loadResult{}, fmt.Errorf("h2load: %w\n%s", err, out)
		}
		log, err := os.ReadFile(logf)
		if err != nil {
			return loadResult{}, err
		}
		return parseH2load(out, log)
	}
	script := ""
	if s.pace > 0 {
		script = dir + "/pace-" + strconv.FormatInt(s.pace.Milliseconds(), 10) + "ms.lua"
		if err := os.WriteFile(script, []byte(paceScript(s.pace)), 0o644); err != nil {
			return loadResult{}, err
		}
	}
	out, err := command(s.dur+30*time.Second, "taskset", wrkArgs(s, script)...)
	if err != nil {
		return loadResult{}, fmt.Errorf("wrk: %w\n%s", err, out)
	}
	return parseWrk(out)
}

// wrkArgs is the taskset command line of a wrk run (CPU 0, one thread,
// --latency); script, when not empty, is the Lua file of s.pace.
func wrkArgs(s loadSpec, script string) []string {
	args := []string{"-c", "0", "wrk", "-t", "1", "-c", strconv.Itoa(s.conns),
		"-d", strconv.Itoa(int(s.dur.Seconds())) + "s", "--latency", "--timeout", "5s"}
	if script != "" {
		args = append(args, "-s", script)
	}
	for _, h := range s.headers {
		args = append(args, "-H", h)
	}
	return append(args, s.url)
}

// paceScript is wrk's Lua hook for a wait of d between a response and the
// connection's next request. wrk measures a request's latency from its
// own send, so the wait is not in the figures.
func paceScript(d time.Duration) string {
	return "function delay()\n  return " + strconv.FormatInt(max(1, d.Milliseconds()), 10) + "\nend\n"
}
