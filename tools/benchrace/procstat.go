package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/PID/stat's CPU times; it is 100
// on every Linux architecture Go supports.
const clockTick = 100

// procStat is what the harness reads from one /proc/PID/stat line.
type procStat struct {
	pid, ppid int
	// utime, stime, cutime, cstime in clock ticks.
	utime, stime, cutime, cstime int64
	rssPages                     int64
}

// parseProcStat parses the contents of /proc/PID/stat. The command name
// may hold spaces and parentheses, so the fields are split after the last
// ')'.
func parseProcStat(b []byte) (procStat, error) {
	var st procStat
	open, closeP := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || closeP < open {
		return st, fmt.Errorf("stat line without (comm): %q", b)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:open])))
	if err != nil {
		return st, fmt.Errorf("stat pid: %w", err)
	}
	st.pid = pid
	f := strings.Fields(string(b[closeP+1:]))
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 22 {
		return st, fmt.Errorf("stat line has %d fields after comm, want ≥ 22", len(f))
	}
	nums := []*int64{&st.utime, &st.stime, &st.cutime, &st.cstime}
	for i, p := range nums {
		if *p, err = strconv.ParseInt(f[11+i], 10, 64); err != nil {
			return st, fmt.Errorf("stat field %d: %w", 14+i, err)
		}
	}
	if st.ppid, err = strconv.Atoi(f[1]); err != nil {
		return st, fmt.Errorf("stat ppid: %w", err)
	}
	if st.rssPages, err = strconv.ParseInt(f[21], 10, 64); err != nil {
		return st, fmt.Errorf("stat rss: %w", err)
	}
	return st, nil
}

// cpuTicks is CPU time of a process tree, in clock ticks.
type cpuTicks struct{ user, sys int64 }

func (c cpuTicks) sub(o cpuTicks) cpuTicks { return cpuTicks{c.user - o.user, c.sys - o.sys} }

// micros converts ticks to microseconds.
func (c cpuTicks) micros() (user, sys float64) {
	return float64(c.user) * 1e6 / clockTick, float64(c.sys) * 1e6 / clockTick
}

// allStats reads every process's stat.
func allStats() map[int]procStat {
	out := map[int]procStat{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		if st, err := parseProcStat(b); err == nil {
			out[st.pid] = st
		}
	}
	return out
}

// tree returns the pids of roots and all their descendants in stats.
func tree(stats map[int]procStat, roots ...int) []int {
	children := map[int][]int{}
	for _, st := range stats {
		children[st.ppid] = append(children[st.ppid], st.pid)
	}
	var out []int
	seen := map[int]bool{}
	var walk func(int)
	walk = func(pid int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		if _, ok := stats[pid]; ok {
			out = append(out, pid)
		}
		for _, c := range children[pid] {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	return out
}

// treeCPU sums user and system time (children that exited included) over
// the process trees of roots: nginx's and HAProxy's workers count.
func treeCPU(roots ...int) cpuTicks {
	stats := allStats()
	var c cpuTicks
	for _, pid := range tree(stats, roots...) {
		st := stats[pid]
		c.user += st.utime + st.cutime
		c.sys += st.stime + st.cstime
	}
	return c
}

// parseSmapsRollup returns Rss and Pss in KiB from /proc/PID/smaps_rollup.
func parseSmapsRollup(b []byte) (rssKiB, pssKiB int64) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Rss:":
			rssKiB = v
		case "Pss:":
			pssKiB = v
		}
	}
	return rssKiB, pssKiB
}

// treeMemory sums Rss and Pss (KiB) over the process trees of roots. Pss
// shares pages between nginx's master and worker rather than counting them
// twice.
func treeMemory(roots ...int) (rssKiB, pssKiB int64) {
	stats := allStats()
	for _, pid := range tree(stats, roots...) {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
		if err != nil {
			rssKiB += stats[pid].rssPages * int64(os.Getpagesize()) / 1024
			continue
		}
		r, p := parseSmapsRollup(b)
		rssKiB += r
		pssKiB += p
	}
	return rssKiB, pssKiB
}

// loadAvg is the 1-minute load average.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// countSyscalls counts the syscalls of pids' threads for d with perf
// stat; -1 when perf is missing or fails.
func countSyscalls(d time.Duration, pids []int) int64 {
	var ps []string
	for _, p := range pids {
		ps = append(ps, strconv.Itoa(p))
	}
	out, err := command(d+20*time.Second, "perf", "stat", "-x", ",", "-e", "raw_syscalls:sys_enter",
		"-p", strings.Join(ps, ","), "--", "sleep", strconv.FormatFloat(d.Seconds(), 'f', 1, 64))
	if err != nil {
		return -1
	}
	return parsePerfCount(out)
}

// parsePerfCount reads the count of `perf stat -x ,` output.
func parsePerfCount(out string) int64 {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Split(l, ",")
		if len(f) >= 3 && strings.Contains(l, "raw_syscalls:sys_enter") {
			if n, err := strconv.ParseInt(strings.TrimSpace(f[0]), 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// cpuTimes is what /proc/stat says of some CPUs, in clock ticks: busy
// time split into user (user, nice) and sys (system, irq, softirq), the
// time the hypervisor gave to others while they had work (steal), and
// the total of every column.
type cpuTimes struct{ user, sys, steal, total int64 }

func (c cpuTimes) sub(o cpuTimes) cpuTimes {
	return cpuTimes{c.user - o.user, c.sys - o.sys, c.steal - o.steal, c.total - o.total}
}

// busy is the work done on the CPUs, without steal.
func (c cpuTimes) busy() cpuTicks { return cpuTicks{c.user, c.sys} }

// stealPct is steal as a share of all the CPUs' time.
func (c cpuTimes) stealPct() float64 {
	if c.total <= 0 {
		return 0
	}
	return 100 * float64(c.steal) / float64(c.total)
}

// cpuStat reads /proc/stat for the CPUs in list.
func cpuStat(list string) cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	return parseCPUStat(b, list)
}

// cpuSet is the CPUs of a taskset list such as "0" or "0,2-3".
func cpuSet(list string) map[int]bool {
	want := map[int]bool{}
	for _, part := range strings.Split(list, ",") {
		lo, hi, found := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		z := a
		var err2 error
		if found {
			z, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil {
			continue
		}
		for i := a; i <= z; i++ {
			want[i] = true
		}
	}
	return want
}

// parseCPUStat reads the per-CPU lines of /proc/stat named by list (a
// taskset list such as "0" or "0,2-3").
func parseCPUStat(b []byte, list string) cpuTimes {
	want := map[string]bool{}
	for i := range cpuSet(list) {
		want["cpu"+strconv.Itoa(i)] = true
	}
	var c cpuTimes
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 9 || !want[f[0]] {
			continue
		}
		var v []int64
		for _, x := range f[1:] {
			n, _ := strconv.ParseInt(x, 10, 64)
			v = append(v, n)
		}
		// user nice system idle iowait irq softirq steal [guest guest_nice,
		// which user and nice already count]
		c.user += v[0] + v[1]
		c.sys += v[2] + v[5] + v[6]
		c.steal += v[7]
		for _, n := range v[:8] {
			c.total += n
		}
	}
	return c
}

// wakeIPIs is how many rescheduling and function-call interrupts the CPUs
// of each list have received since boot (/proc/interrupts' RES and CAL
// rows), from one read of the file.
// A task woken on a CPU that is idle, or that must preempt what runs
// there, costs one; on this kind of VM each is an exit to the
// hypervisor, charged to the waker's system time (docs/BENCHMARKS.md,
// "Reading the race").
func wakeIPIs(a, b string) (int64, int64) {
	f, err := os.ReadFile("/proc/interrupts")
	if err != nil {
		return 0, 0
	}
	return parseWakeIPIs(f, a), parseWakeIPIs(f, b)
}

func parseWakeIPIs(b []byte, list string) int64 {
	want := cpuSet(list)
	sc := bufio.NewScanner(bytes.NewReader(b))
	var cols []int // column i is CPU cols[i]
	var n int64
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if cols == nil {
			for _, h := range f {
				if c, err := strconv.Atoi(strings.TrimPrefix(h, "CPU")); err == nil && strings.HasPrefix(h, "CPU") {
					cols = append(cols, c)
				}
			}
			continue
		}
		if len(f) == 0 || (f[0] != "RES:" && f[0] != "CAL:") {
			continue
		}
		for i, c := range cols {
			if i+1 >= len(f) {
				break
			}
			if v, err := strconv.ParseInt(f[i+1], 10, 64); err == nil && want[c] {
				n += v
			}
		}
	}
	return n
}
