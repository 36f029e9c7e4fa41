package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

const wrkOut = `Running 3s test @ http://127.0.0.1:8080/hash/1k
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.23ms  456.00us  12.34ms   78.90%
    Req/Sec    25.00k     1.23k   27.00k    80.00%
  Latency Distribution
     50%  850.00us
     75%    1.40ms
     90%    1.80ms
     99%    3.20ms
  75012 requests in 3.00s, 90.00MB read
  Non-2xx or 3xx responses: 12
  Socket errors: connect 0, read 2, write 0, timeout 1
Requests/sec:  25004.00
Transfer/sec:     30.00MB
`

func TestParseWrk(t *testing.T) {
	r, err := parseWrk(wrkOut)
	if err != nil {
		t.Fatal(err)
	}
	want := loadResult{Requests: 75012, Seconds: 3, RPS: 25004, P50us: 850, P99us: 3200, Errors: 15}
	if r != want {
		t.Fatalf("parseWrk = %+v, want %+v", r, want)
	}
	if _, err := parseWrk(strings.Replace(wrkOut, "  Latency Distribution", "", 1)[:200]); err == nil {
		t.Fatal("output without totals parsed")
	}
	noLatency := strings.NewReplacer("     50%  850.00us\n", "", "     99%    3.20ms\n", "").Replace(wrkOut)
	if _, err := parseWrk(noLatency); err == nil {
		t.Fatal("output without --latency percentiles parsed")
	}
}

func TestParseH2load(t *testing.T) {
	out := `finished in 3.00s, 10000.33 req/s, 11.20MB/s
requests: 30001 total, 30033 started, 30001 done, 29999 succeeded, 2 failed, 0 errored, 0 timeout
status codes: 29999 2xx, 0 3xx, 0 4xx, 2 5xx
`
	var log strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&log, "1700000000000000\t200\t%d\n", i*10)
	}
	log.WriteString("1700000000000000\t502\t999999\n") // failed: not a latency
	r, err := parseH2load(out, []byte(log.String()))
	if err != nil {
		t.Fatal(err)
	}
	want := loadResult{Requests: 29999, Seconds: 3, RPS: 10000.33, P50us: 500, P99us: 990, Errors: 2}
	if r != want {
		t.Fatalf("parseH2load = %+v, want %+v", r, want)
	}
}

func TestParseProcStat(t *testing.T) {
	// A command name with a space and a parenthesis, as a process may
	// name itself.
	line := "4242 (nginx: (worker) 1) S 4241 4241 4241 0 -1 4194624 150 0 0 0 1234 567 8 9 20 0 1 0 100 12345678 2048 18446744073709551615\n"
	st, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := procStat{pid: 4242, ppid: 4241, utime: 1234, stime: 567, cutime: 8, cstime: 9, rssPages: 2048}
	if st != want {
		t.Fatalf("parseProcStat = %+v, want %+v", st, want)
	}
	if _, err := parseProcStat([]byte("4242 nginx S 1")); err == nil {
		t.Fatal("line without (comm) parsed")
	}
	stats := map[int]procStat{1: {pid: 1}, 10: {pid: 10, ppid: 1}, 11: {pid: 11, ppid: 10}, 12: {pid: 12, ppid: 11}, 20: {pid: 20, ppid: 1}}
	got := tree(stats, 10)
	if len(got) != 3 {
		t.Fatalf("tree(10) = %v, want 10, 11, 12", got)
	}
}

func TestParseCPUStat(t *testing.T) {
	stat := "cpu  900 9 300 5000 50 1 2 3 0 0\n" +
		"cpu0 400 4 100 2000 20 1 1 10 5 0\n" +
		"cpu1 500 5 200 3000 30 0 1 2 0 0\n" +
		"cpu10 7 7 7 7 7 7 7 7 0 0\n" +
		"intr 12345\n"
	for _, tc := range []struct {
		list string
		want cpuTimes
	}{
		// user+nice; system+irq+softirq; steal; the first eight columns
		// (guest is in user already)
		{"0", cpuTimes{user: 404, sys: 102, steal: 10, total: 2536}},
		{"1", cpuTimes{user: 505, sys: 201, steal: 2, total: 3738}}, // not cpu10
		{"0-1", cpuTimes{user: 909, sys: 303, steal: 12, total: 6274}},
		{"0,10", cpuTimes{user: 418, sys: 123, steal: 17, total: 2592}},
		{"x", cpuTimes{}},
	} {
		if got := parseCPUStat([]byte(stat), tc.list); got != tc.want {
			t.Errorf("parseCPUStat(%q) = %+v, want %+v", tc.list, got, tc.want)
		}
	}
	d := cpuTimes{user: 30, sys: 20, steal: 25, total: 100}
	if d.stealPct() != 25 || d.busy() != (cpuTicks{30, 20}) || (cpuTimes{}).stealPct() != 0 {
		t.Fatalf("stealPct %v, busy %+v", d.stealPct(), d.busy())
	}
}

func TestStolen(t *testing.T) {
	for _, tc := range []struct {
		proxy, load, max float64
		want             bool
	}{
		{1, 1, 3, false},
		{3.5, 0, 3, true},  // the proxy's CPU
		{0, 3.5, 3, true},  // the load's
		{3, 3, 3, false},   // at the limit
		{50, 50, 0, false}, // 0: never
	} {
		if got := stolen(result{StealPct: tc.proxy, LoadStealPct: tc.load}, tc.max); got != tc.want {
			t.Errorf("stolen(%v, %v, max %v) = %v", tc.proxy, tc.load, tc.max, got)
		}
	}
}

func TestParseSmapsRollup(t *testing.T) {
	rss, pss := parseSmapsRollup([]byte("00400000-7ffd [rollup]\nRss:               51512 kB\nPss:               35209 kB\nPss_Anon:  1 kB\n"))
	if rss != 51512 || pss != 35209 {
		t.Fatalf("rss, pss = %d, %d", rss, pss)
	}
}

func TestReportTable(t *testing.T) {
	r := &report{Rounds: 3, Duration: "3s", Conns: 32, Backend: "raw", MaxSteal: 3, Stolen: []result{{}}, Cases: cases[:3], Versions: map[string]string{"haproxy": "HAProxy 2.6"}}
	for round := 1; round <= 3; round++ {
		f := float64(round)
		r.Results = append(r.Results,
			result{Round: round, Case: "ka-1k", Target: "tether", loadResult: loadResult{RPS: 1000 * f, P50us: 900, P99us: 2000 * f}, CPUusPerReq: 30 + f, LoadUs: 20 + f, StealPct: f, LoadStealPct: 2 * f, LoadIPIs: 0.1 * f, ProxyIPIs: 0.01 * f},
			result{Round: round, Case: "ka-1k", Target: "stdlib", loadResult: loadResult{RPS: 900}, CPUusPerReq: 40},
			result{Round: round, Case: "ka-1k", Target: "haproxy", loadResult: loadResult{RPS: 2000}, CPUusPerReq: 16},
			result{Round: round, Case: "ka-1k", Target: "tether-nolog", loadResult: loadResult{RPS: 1000}, CPUusPerReq: 26},
			result{Round: round, Case: "ka-1k", Target: "haproxy-nolog", loadResult: loadResult{RPS: 2000}, CPUusPerReq: 13},
			result{Round: round, Case: "ka-1k-cookie", Target: "tether", loadResult: loadResult{RPS: 800}, CPUusPerReq: 48},
			result{Round: round, Case: "ka-1k-paced", Target: "tether", loadResult: loadResult{RPS: 700}, CPUusPerReq: 60},
			result{Round: round, Case: "ka-1k-paced", Target: "haproxy", loadResult: loadResult{RPS: 700}, CPUusPerReq: 40},
		)
	}
	r.summarize()
	md := r.markdown()
	for _, want := range []string{
		"| ka-1k | tether | 2000 (1000–3000) | 900 µs | 4.00 ms (2.00 ms–6.00 ms) | +4.00 ms | 32.0 (31.0–33.0) |",
		"| 0.80 | 2.00 | 22.0 | 0.200 / 0.020 | 0 |", // tether: 32 / 40 stdlib, 32 / 16 HAProxy; load CPU's median; IPIs' medians
		"| ka-1k-cookie | tether |",
		"| 1.20 | 3.00 | 0.0 | 0.000 / 0.000 | 0 |", // a tether-only case compares with ka-1k's
		"(tether only; its ratios are to ka-1k's stdlib and HAProxy)",
		"| ka-1k-paced | tether |",
		"| 1.50 | 1.50 | 0.0 | 0.000 / 0.000 | 0 |", // its own HAProxy (60 / 40); ka-1k's stdlib, as the case ran none
		"haproxy: `HAProxy 2.6`",
		"32 connections (h2load: 4 × 8 streams), raw backends;",
		"median (max) over the runs kept: proxy CPU 0.0 % (3.0 %), load CPU 0.0 % (6.0 %).", // tether's rounds and eight zeros
		"Runs with more than 3.0 % were measured again: 1 of 25.",
		// tether's rounds 31, 32, 33 over HAProxy's 16; the cookie case's
		// 48 over ka-1k's HAProxy of the same round; the paced 60 / 40.
		// tether-nolog's 26 over haproxy-nolog's 13, not haproxy's 16.
		"Paired against HAProxy (median, min–max over the rounds of each round's CPU per request over HAProxy's in the same round; ka-1k's HAProxy for the tether-only cases; tether-nolog against haproxy-nolog): ka-1k tether 2.00 (1.94–2.06); ka-1k tether-nolog 2.00 (2.00–2.00); ka-1k-cookie tether 3.00 (3.00–3.00); ka-1k-paced tether 1.50 (1.50–1.50).",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	png, err := r.chart()
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("chart: %v (%d bytes)", err, len(png))
	}
	doc := "# Benchmarks\n\nintro\n"
	once := splice(doc, "TABLE 1")
	twice := splice(once, "TABLE 2")
	if !strings.Contains(once, "TABLE 1") || strings.Contains(twice, "TABLE 1") || !strings.Contains(twice, "TABLE 2") || !strings.HasPrefix(twice, doc) {
		t.Fatalf("splice: once %q, twice %q", once, twice)
	}
}

func TestParsePerfCount(t *testing.T) {
	out := "\n123456,,raw_syscalls:sys_enter,2001234567,100.00,,\n"
	if n := parsePerfCount(out); n != 123456 {
		t.Fatalf("parsePerfCount = %d", n)
	}
	if n := parsePerfCount("<not counted>,,raw_syscalls:sys_enter,0,0.00,,\n"); n != -1 {
		t.Fatalf("not counted = %d, want -1", n)
	}
}

func TestWrkArgsPace(t *testing.T) {
	s := loadSpec{url: "http://127.0.0.1:1/hash/1k", conns: 32, dur: 3 * time.Second, headers: []string{"Cookie: a=b"}}
	plain := strings.Join(wrkArgs(s, ""), " ")
	if want := "-c 0 wrk -t 1 -c 32 -d 3s --latency --timeout 5s -H Cookie: a=b http://127.0.0.1:1/hash/1k"; plain != want {
		t.Errorf("wrkArgs = %q, want %q", plain, want)
	}
	s.pace = 3 * time.Millisecond
	paced := strings.Join(wrkArgs(s, "/tmp/pace.lua"), " ")
	if want := "-c 0 wrk -t 1 -c 32 -d 3s --latency --timeout 5s -s /tmp/pace.lua -H Cookie: a=b http://127.0.0.1:1/hash/1k"; paced != want {
		t.Errorf("wrkArgs = %q, want %q", paced, want)
	}
	if got, want := paceScript(3*time.Millisecond), "function delay()\n  return 3\nend\n"; got != want {
		t.Errorf("paceScript = %q, want %q", got, want)
	}
	if got := paceScript(100 * time.Microsecond); !strings.Contains(got, "return 1\n") {
		t.Errorf("a pace under 1 ms is wrk's smallest delay (1 ms), got %q", got)
	}
}

func TestPaceRefusedWithH2(t *testing.T) {
	_, err := runLoad(t.TempDir(), loadSpec{url: "http://127.0.0.1:1/", conns: 1, dur: time.Second, h2: true, pace: time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "paced case runs wrk") {
		t.Fatalf("h2 with a pace: err = %v, want a refusal naming wrk", err)
	}
}

// TestPaceBoundsTheRate runs the paced wrk for a second against a local
// server (when wrk is installed): 2 connections waiting 20 ms between
// requests make at most 100 requests a second, where an unpaced run
// makes thousands.
func TestPaceBoundsTheRate(t *testing.T) {
	if _, err := exec.LookPath("wrk"); err != nil {
		t.Skip("wrk is not installed (make bench-race installs it)")
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("no taskset")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	r, err := runLoad(t.TempDir(), loadSpec{url: srv.URL + "/", conns: 2, dur: time.Second, pace: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests < 20 || r.Requests > 110 {
		t.Errorf("2 connections paced at 20 ms made %d requests in 1 s, want about 100 (20-110)", r.Requests)
	}
}

func TestParseWakeIPIs(t *testing.T) {
	// As Linux 6.x prints it (columns are the online CPUs, here 0, 1, 3).
	const in = `           CPU0       CPU1       CPU3
  1:          9          0          0  IO-APIC    1-edge      i8042
NMI:          0          0          0   Non-maskable interrupts
LOC:     123456      98765       4321   Local timer interrupts
RES:      14259        157          7   Rescheduling interrupts
CAL:       6379        390          2   Function call interrupts
TLB:          0          0          0   TLB shootdowns
`
	for _, tc := range []struct {
		list string
		want int64
	}{
		{"0", 14259 + 6379},
		{"1", 157 + 390},
		{"3", 7 + 2},
		{"0-1", 14259 + 6379 + 157 + 390},
		{"2", 0}, // offline: no column
	} {
		if got := parseWakeIPIs([]byte(in), tc.list); got != tc.want {
			t.Errorf("CPUs %s: %d wake IPIs, want %d", tc.list, got, tc.want)
		}
	}
}

func TestPairedAgainstBase(t *testing.T) {
	r := &report{Cases: cases[:1]}
	p99 := [][3]float64{{3000, 2500, 1500}, {2000, 3500, 2200}, {4000, 3000, 2000}} // tether, tether-base, HAProxy
	for round, cpu := range [][2]float64{{40, 50}, {60, 55}, {45, 50}} {            // tether, tether-base
		r.Results = append(r.Results,
			result{Round: round + 1, Case: "ka-1k", Target: "tether", CPUusPerReq: cpu[0], loadResult: loadResult{P99us: p99[round][0]}},
			result{Round: round + 1, Case: "ka-1k", Target: "tether-base", CPUusPerReq: cpu[1], loadResult: loadResult{P99us: p99[round][1]}},
			result{Round: round + 1, Case: "ka-1k", Target: "haproxy", CPUusPerReq: 20, loadResult: loadResult{P99us: p99[round][2]}},
		)
	}
	// A round only one of them ran (a failed run, a case that skipped one)
	// is not paired.
	r.Results = append(r.Results, result{Round: 4, Case: "ka-1k", Target: "tether", CPUusPerReq: 1})
	r.summarize()
	got := r.pairedNotes()
	for _, want := range []string{
		"ka-1k tether 2.25 (2.00–3.00)",      // 40, 60, 45 over 20
		"ka-1k tether-base 2.50 (2.50–2.75)", // 50, 55, 50 over 20
		"tether against tether-base, paired the same way: ka-1k 0.900 (0.800–1.091), tether lower in 2 of 3 rounds.",
		// p99 minus HAProxy's of the same round: 1500, -200, 2000 for
		// tether; 1000, 1300, 1000 for tether-base. The medians of the
		// rounds (3000 against 2000) would say +1.00 ms for tether.
		"p99 paired against HAProxy (median, min–max over the rounds of each round's p99 minus HAProxy's in the same round and case): ka-1k tether +1.50 ms (-0.20 ms–+2.00 ms), within +1 ms in 1 of 3 rounds; ka-1k tether-base +1.00 ms (+1.00 ms–+1.30 ms), within +1 ms in 2 of 3 rounds.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("paired notes lack %q:\n%s", want, got)
		}
	}
}

// TestProfiledCase: -profile runs ka-1k, or the first of -cases when the
// profiled tether serves it (h2c-1k on its h2c listener), and refuses a
// case of other targets or an unknown name instead of profiling ka-1k.
func TestProfiledCase(t *testing.T) {
	for _, tc := range []struct {
		sel     []string
		want    string
		h2      bool
		errText string
	}{
		{sel: nil, want: "ka-1k"},
		{sel: []string{"close-1k"}, want: "close-1k"},
		{sel: []string{"ka-64k", "ka-1k"}, want: "ka-64k"},
		{sel: []string{"h2c-1k"}, want: "h2c-1k", h2: true},
		{sel: []string{"ka-1k-paced"}, want: "ka-1k-paced"},
		{sel: []string{"h2-tls.nethttp"}, want: "h2-tls.nethttp", h2: true},
		{sel: []string{"tls-new"}, want: "tls-new"},
		{sel: []string{"cluster-3"}, errText: "case cluster-3 needs a target of its own (tether-cluster3)"},
		{sel: []string{"10k-dests"}, errText: "(tether-10k)"},
		{sel: []string{"ka-1k-cookie"}, errText: "profile one of ka-1k, ka-1k.nethttp, ka-1k-paced, ka-1k-paced.nethttp, close-1k,"},
		{sel: []string{"h2c"}, errText: `no case "h2c"; profile one of ka-1k,`},
	} {
		c, err := profiledCase(tc.sel)
		if tc.errText != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errText) {
				t.Errorf("%v: err %v, want one saying %q", tc.sel, err, tc.errText)
			}
			continue
		}
		if err != nil || c.Name != tc.want || c.h2 != tc.h2 {
			t.Errorf("%v: %q (h2 %v), %v; want %q (h2 %v)", tc.sel, c.Name, c.h2, err, tc.want, tc.h2)
		}
	}
}

// TestReportKeepsEveryTarget: a measured target that targetOrder does not
// list is reported after the listed ones, not dropped (bare-loop was,
// before it was listed).
func TestReportKeepsEveryTarget(t *testing.T) {
	r := &report{Rounds: 1, Duration: "3s", Conns: 32, Cases: cases[:1]}
	r.Results = []result{
		{Round: 1, Case: "ka-1k", Target: "zz-new", loadResult: loadResult{RPS: 100}, CPUusPerReq: 50},
		{Round: 1, Case: "ka-1k", Target: "haproxy", loadResult: loadResult{RPS: 200}, CPUusPerReq: 20},
		{Round: 1, Case: "ka-1k", Target: "bare-loop", loadResult: loadResult{RPS: 150}, CPUusPerReq: 25},
	}
	r.summarize()
	var got []string
	for _, s := range r.Summaries {
		got = append(got, s.Target)
	}
	if want := []string{"bare-loop", "haproxy", "zz-new"}; !slices.Equal(got, want) {
		t.Fatalf("summaries %v, want %v", got, want)
	}
	if md := r.markdown(); !strings.Contains(md, "| ka-1k | zz-new |") || !strings.Contains(md, "| ka-1k | bare-loop |") {
		t.Fatalf("table lacks a target:\n%s", md)
	}
	if png, err := r.chart(); err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("chart: %v", err)
	}
}

// TestCheckSelection: a name in -cases or -targets that names nothing is
// refused before the race, as is tether-base without -baseline.
func TestCheckSelection(t *testing.T) {
	for _, tc := range []struct {
		o       options
		errText string
	}{
		{o: options{}},
		{o: options{caseSel: []string{"ka-1k", "h2c-1k"}, only: []string{"tether", "haproxy", "bare-loop"}}},
		{o: options{only: []string{"tether-base"}, baseline: "HEAD"}},
		{o: options{caseSel: []string{"ka-1k", "ka1k"}}, errText: `-cases: no case "ka1k"`},
		{o: options{only: []string{"bare-lop"}}, errText: `-targets: no target "bare-lop"; the targets are tether,`},
		{o: options{only: []string{"tether-base"}}, errText: "-baseline, which is not given"},
		{o: options{baseline: "HEAD", baseEnv: "GOGC=400,TETHER_WRITE_YIELD=off"}},
		{o: options{baseEnv: "GOGC=400"}, errText: "-baseline-env: it is tether-base's environment, and -baseline is not given"},
		{o: options{baseline: "HEAD", baseEnv: "GOGC"}, errText: `-baseline-env: "GOGC" is not KEY=VALUE`},
	} {
		err := checkSelection(tc.o)
		if tc.errText == "" && err != nil || tc.errText != "" && (err == nil || !strings.Contains(err.Error(), tc.errText)) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.errText)
		}
	}
}

// procState is the state letter of pid in /proc (R, S, T for stopped...).
func procState(t *testing.T, pid int) byte {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	return s[strings.LastIndexByte(s, ')')+2]
}

// alone stops (SIGSTOP) every pausable target but the one about to run,
// continues that one if it was stopped and has it warmed up again, and a
// stopped target still ends at once when the run is over.
func TestAlonePausesTheOthers(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process states are read from /proc")
	}
	mk := func(name string, pausable bool) *target {
		p, _, err := startProc(name, "0-1", filepath.Join(t.TempDir(), name+".log"), false, nil, "sleep", "60")
		if err != nil {
			t.Fatal(err)
		}
		tg := &target{name: name, procs: []*proc{p}, pausable: pausable}
		t.Cleanup(tg.stop)
		return tg
	}
	plain, ten, three := mk("haproxy", false), mk("tether-10k", true), mk("tether-cluster3", true)
	targets := []*target{plain, ten, three}
	waitState := func(tg *target, want byte) {
		t.Helper()
		testutil.Eventually(t, 5*time.Second, fmt.Sprintf("%s in state %c", tg.name, want), func() bool {
			return procState(t, tg.procs[0].pid()) == want
		})
	}
	ss := newSession()
	alone(targets, plain, ss)
	waitState(ten, 'T')
	waitState(three, 'T')
	if plain.paused || !ten.paused || !three.paused || len(ss.resumed) != 0 {
		t.Fatalf("paused: %v %v %v, resumed %v", plain.paused, ten.paused, three.paused, ss.resumed)
	}
	alone(targets, ten, ss)
	waitState(ten, 'S')
	waitState(three, 'T')
	if ten.paused || !three.paused || !ss.resumed["tether-10k"] || ss.resumed["tether-cluster3"] {
		t.Fatalf("paused: %v %v, resumed %v", ten.paused, three.paused, ss.resumed)
	}
	if procState(t, plain.procs[0].pid()) == 'T' {
		t.Fatal("a target that is not pausable was stopped")
	}
	start := time.Now()
	three.stop()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("stopping a paused target took %v (SIGTERM waited for SIGCONT)", d)
	}
}

// TestReportComparesTheOwnLoop: a run with tether-noloop (tether with its
// own HTTP/1.1 loop off) reports the loop's CPU saving paired by round
// and an idle connection's memory with the loop and without, against
// HAProxy's.
func TestReportComparesTheOwnLoop(t *testing.T) {
	r := &report{Cases: cases[:1]}
	for round, cpu := range [][2]float64{{40, 50}, {44, 55}, {45, 44}} { // tether, tether-noloop
		r.Results = append(r.Results,
			result{Round: round + 1, Case: "ka-1k", Target: "tether", CPUusPerReq: cpu[0]},
			result{Round: round + 1, Case: "ka-1k", Target: "tether-noloop", CPUusPerReq: cpu[1]},
		)
	}
	r.Memory = []memResult{
		{Target: "tether", Conns: 1000, Opened: 1000, IdleRSS: 60000, LoadedRSS: 63000},
		{Target: "tether-noloop", Conns: 1000, Opened: 1000, IdleRSS: 60000, LoadedRSS: 80000},
		{Target: "haproxy", Conns: 1000, Opened: 1000, IdleRSS: 16000, LoadedRSS: 17500},
	}
	r.summarize()
	got := r.markdown()
	if strings.Contains(got, "| ka-1k | tether-noloop |") {
		t.Errorf("tether-noloop has a row of the table; its figures belong to the note:\n%s", got)
	}
	for _, want := range []string{
		// 40/50, 44/55, 45/44: 0.8, 0.8, 1.023; the medians 44 and 50.
		"tether against tether-noloop (the same binary with TETHER_HTTP1_SERVER=stdlib), paired the same way: ka-1k 0.800 (0.800–1.023), tether lower in 2 of 3 rounds, by the medians 44.0 against 50.0 µs per request (12 % saved).",
		"with the own HTTP/1.1 loop: 3.0 KiB; without it (net/http's server, tether-noloop): 20.0 KiB; HAProxy 1.5 KiB (tether 2.0×).",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
}

// TestWriteRewritesOnlyTheBlockAndPutsRawFiguresInBin: the harness rewrites
// the generated block of docs/BENCHMARKS.md in place (the text around it
// stays), refreshes the chart, and writes the raw per-round figures to
// bin/bench-race.json, never into docs/; the doc names no commit.
func TestWriteRewritesOnlyTheBlockAndPutsRawFiguresInBin(t *testing.T) {
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	doc := "# Benchmarks\n\nbefore\n\n" + beginMarker + "\nOLD TABLE\n" + endMarker + "\n\nafter\n"
	if err := os.WriteFile(filepath.Join(repo, "docs/BENCHMARKS.md"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &report{Rounds: 1, Duration: "1s", Conns: 32, Backend: "raw", Cases: cases[:1],
		Versions: map[string]string{"haproxy": "HAProxy 2.6", "tether": "0123abc"}}
	r.Results = []result{
		{Round: 1, Case: "ka-1k", Target: "tether", loadResult: loadResult{RPS: 1000, P50us: 900, P99us: 2000}, CPUusPerReq: 30},
		{Round: 1, Case: "ka-1k", Target: "haproxy", loadResult: loadResult{RPS: 2000, P50us: 800, P99us: 1500}, CPUusPerReq: 16},
	}
	r.summarize()
	if err := r.write(repo); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(repo, "docs/BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	md := string(got)
	for _, want := range []string{"# Benchmarks\n\nbefore\n\n" + beginMarker, "| ka-1k | tether |", "img/bench-race.png", endMarker + "\n\nafter\n"} {
		if !strings.Contains(md, want) {
			t.Errorf("BENCHMARKS.md lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "OLD TABLE") || strings.Contains(md, "0123abc") {
		t.Errorf("BENCHMARKS.md keeps the old block or names the commit:\n%s", md)
	}
	if _, err := os.Stat(filepath.Join(repo, "docs/bench-race.json")); !os.IsNotExist(err) {
		t.Errorf("docs/bench-race.json was written (%v): raw figures belong in bin/", err)
	}
	js, err := os.ReadFile(filepath.Join(repo, "bin/bench-race.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back report
	if err := json.Unmarshal(js, &back); err != nil || len(back.Results) != 2 || back.Versions["tether"] != "0123abc" {
		t.Errorf("bin/bench-race.json: %v, %d results, versions %v", err, len(back.Results), back.Versions)
	}
	if png, err := os.ReadFile(filepath.Join(repo, "docs/img/bench-race.png")); err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Errorf("chart: %v", err)
	}
}

// TestFullRaceKeepsBenchmarksUnder400Lines: docs/BENCHMARKS.md with the
// block of a full race (every default target, every case, five rounds, the
// memory phase, a baseline) spliced in stays a page a user reads: under 400
// lines, its hand-written sections kept.
func TestFullRaceKeepsBenchmarksUnder400Lines(t *testing.T) {
	doc, err := os.ReadFile("../../docs/BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	targets := []string{"tether", "tether-base", "tether-noloop", "stdlib", "haproxy", "nginx", "caddy", "tether-10k", "tether-cluster3"}
	all := expandCases(backendKinds)
	r := &report{Rounds: 5, Duration: "3s", Conns: 32, Backend: "raw and nethttp", MaxSteal: 3, Cases: all,
		Versions: map[string]string{"haproxy": "HAProxy 2.6", "nginx": "nginx/1.22.1", "caddy": "2.6.2", "wrk": "wrk 4.1.0", "h2load": "h2load 1.52.0"}}
	for round := 1; round <= 5; round++ {
		for _, c := range all {
			for i, tn := range targets {
				if len(c.only) > 0 && !slices.Contains(c.only, tn) {
					continue
				}
				if len(c.only) == 0 && (tn == "tether-10k" || tn == "tether-cluster3") {
					continue
				}
				r.Results = append(r.Results, result{Round: round, Case: c.Name, Target: tn,
					loadResult: loadResult{RPS: 20000, P50us: 1000, P99us: 3000 + float64(i)}, CPUusPerReq: 30 + float64(i), SyscallsPerReq: 5})
			}
		}
	}
	for _, tn := range targets[:7] {
		r.Memory = append(r.Memory, memResult{Target: tn, Conns: 10000, Opened: 10000, IdleRSS: 60000, LoadedRSS: 100000, LoadedPSS: 90000})
		r.Burst = append(r.Burst, burstResult{Target: tn, Conns: 5000, Opened: 5000, IdleRSS: 60000, PeakRSS: 200000, At15RSS: 90000, At60RSS: 80000})
	}
	r.summarize()
	body := r.markdown() + "\n![CPU per request by case and proxy](img/bench-race.png)\n"
	out := splice(string(doc), body)
	n := strings.Count(out, "\n")
	t.Logf("BENCHMARKS.md after a full race: %d lines", n)
	if n >= 400 {
		t.Errorf("BENCHMARKS.md after a full race: %d lines, want under 400 (the page is for users: move detail to proxy/DESIGN.md or bin/bench-race.json)", n)
	}
	for _, want := range []string{"## How to reproduce", "## Race: tether", "### Reading the race", "## Why it is fast", "| cluster-3 | tether-cluster3 |"} {
		if !strings.Contains(out, want) {
			t.Errorf("BENCHMARKS.md after a full race lacks %q", want)
		}
	}
}
