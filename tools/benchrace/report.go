package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// report is the whole run, as written to bin/bench-race.json.
type report struct {
	Started   time.Time         `json:"started"`
	Finished  time.Time         `json:"finished"`
	Machine   string            `json:"machine"`
	Versions  map[string]string `json:"versions"`
	Duration  string            `json:"duration_per_run"`
	Rounds    int               `json:"rounds"`
	Conns     int               `json:"conns"`
	Backend   string            `json:"backend"`
	LoadStart float64           `json:"load1_start"`
	LoadEnd   float64           `json:"load1_end"`
	Cases     []caseDef         `json:"cases"`
	Results   []result          `json:"results"`
	// Stolen are the runs measured again for -max-steal (not in Results).
	Stolen    []result      `json:"stolen_runs,omitempty"`
	MaxSteal  float64       `json:"max_steal_pct"`
	Summaries []summary     `json:"summaries"`
	Memory    []memResult   `json:"memory,omitempty"`
	Burst     []burstResult `json:"burst,omitempty"`
}

// stat is min/median/max over rounds.
type stat struct {
	Min, Med, Max float64
}

func statOf(v []float64) stat {
	if len(v) == 0 {
		return stat{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{s[0], med, s[len(s)-1]}
}

// summary is one (case, target) over the rounds.
type summary struct {
	Case   string `json:"case"`
	Target string `json:"target"`
	RPS    stat   `json:"rps"`
	P50us  stat   `json:"p50_us"`
	P99us  stat   `json:"p99_us"`
	CPU    stat   `json:"cpu_us_per_req"`
	User   stat   `json:"user_us_per_req"`
	Sys    stat   `json:"sys_us_per_req"`
	// Load is the load CPU's busy time per request (wrk and the backends).
	Load stat `json:"load_cpu_us_per_req"`
	// LoadIPIs and ProxyIPIs: wake-up interrupts per request received by
	// the load CPU and the proxy CPU (result.LoadIPIs).
	LoadIPIs  stat  `json:"load_wake_ipis_per_req"`
	ProxyIPIs stat  `json:"proxy_wake_ipis_per_req"`
	Errors    int64 `json:"errors"`
	// Syscalls is the median syscalls per request (-syscalls), else 0.
	Syscalls float64 `json:"syscalls_per_req,omitempty"`
	// VsFloor and VsHAProxy are the ratios of the medians of CPU per
	// request to the stdlib floor's and HAProxy's in the same case.
	VsFloor   float64 `json:"cpu_vs_stdlib,omitempty"`
	VsHAProxy float64 `json:"cpu_vs_haproxy,omitempty"`
	// VsHAProxyPaired is min/median/max of the per-round ratios to
	// HAProxy's CPU per request in the same round (report.paired).
	VsHAProxyPaired stat `json:"cpu_vs_haproxy_paired"`
	// P99OverHAProxy is the median p99 minus HAProxy's (µs), same case;
	// HasP99Ref says whether there was one.
	P99OverHAProxy float64 `json:"p99_over_haproxy_us,omitempty"`
	HasP99Ref      bool    `json:"-"`
	// P99OverHAProxyPaired is min/median/max of the per-round p99 minus
	// HAProxy's p99 in the same round and case (µs): the host's drift
	// between rounds moves both, so it cancels here as in the paired CPU
	// ratio.
	P99OverHAProxyPaired stat `json:"p99_over_haproxy_paired_us"`
	// P99PairedRounds is how many rounds were paired, P99PairedWithin
	// how many of them were within HAProxy's p99 + 1 ms.
	P99PairedRounds int `json:"p99_paired_rounds,omitempty"`
	P99PairedWithin int `json:"p99_paired_within_1ms,omitempty"`
}

// targetOrder is the column and bar order.
var targetOrder = []string{"tether", "tether-base", "tether-noloop", "tether-nolog", "stdlib", "bare-nethttp", "bare-own", "bare-gor", "bare-loop", "haproxy", "haproxy-nolog", "nginx", "caddy", "tether-10k", "tether-cluster3"}

// order is targetOrder, then any measured target it does not list (by
// name), so that a target added to the race is never left out of the
// report.
func (r *report) order() []string {
	order := slices.Clone(targetOrder)
	var extra []string
	for _, res := range r.Results {
		if !slices.Contains(order, res.Target) && !slices.Contains(extra, res.Target) {
			extra = append(extra, res.Target)
		}
	}
	slices.Sort(extra)
	return append(order, extra...)
}

func (r *report) summarize() {
	r.Summaries = nil
	order := r.order()
	for _, c := range r.Cases {
		for _, tn := range order {
			var rps, p50, p99, cpu, user, sys, load, lipi, pipi, scs []float64
			var errs int64
			for _, res := range r.Results {
				if res.Case == c.Name && res.Target == tn {
					rps, p50, p99 = append(rps, res.RPS), append(p50, res.P50us), append(p99, res.P99us)
					cpu, user, sys = append(cpu, res.CPUusPerReq), append(user, res.UserUs), append(sys, res.SysUs)
					load = append(load, res.LoadUs)
					lipi, pipi = append(lipi, res.LoadIPIs), append(pipi, res.ProxyIPIs)
					errs += res.Errors
					if res.SyscallsPerReq > 0 {
						scs = append(scs, res.SyscallsPerReq)
					}
				}
			}
			if len(rps) == 0 {
				continue
			}
			r.Summaries = append(r.Summaries, summary{Case: c.Name, Target: tn, RPS: statOf(rps), P50us: statOf(p50),
				P99us: statOf(p99), CPU: statOf(cpu), User: statOf(user), Sys: statOf(sys), Load: statOf(load),
				LoadIPIs: statOf(lipi), ProxyIPIs: statOf(pipi), Errors: errs, Syscalls: statOf(scs).Med})
		}
	}
	// Ratios against the same case's floor and HAProxy; the cases that
	// only tether runs compare with ka-1k's.
	ref := func(c, tn string) float64 {
		for _, s := range r.Summaries {
			if s.Case == c && s.Target == tn {
				return s.CPU.Med
			}
		}
		return 0
	}
	p99 := func(c string) (float64, bool) {
		for _, s := range r.Summaries {
			if s.Case == c && s.Target == "haproxy" {
				return s.P99us.Med, true
			}
		}
		return 0, false
	}
	for i := range r.Summaries {
		s := &r.Summaries[i]
		// Each reference from the same case when it ran there, else
		// ka-1k's (a run of some targets only may have one and not the
		// other).
		refCase := func(tn string) string {
			if ref(s.Case, tn) > 0 {
				return s.Case
			}
			return "ka-1k"
		}
		if f := ref(refCase("stdlib"), "stdlib"); f > 0 {
			s.VsFloor = s.CPU.Med / f
		}
		// A target without its access log is compared with HAProxy
		// without one: the same work on both sides.
		ht := "haproxy"
		if strings.HasSuffix(s.Target, "-nolog") {
			ht = "haproxy-nolog"
		}
		hc := refCase(ht)
		if h := ref(hc, ht); h > 0 {
			s.VsHAProxy = s.CPU.Med / h
			s.VsHAProxyPaired = statOf(r.paired(s.Case, s.Target, hc, ht))
		}
		if h, ok := p99(s.Case); ok { // latencies only within the same case
			s.P99OverHAProxy, s.HasP99Ref = s.P99us.Med-h, true
			d := r.pairedP99(s.Case, s.Target)
			s.P99OverHAProxyPaired, s.P99PairedRounds = statOf(d), len(d)
			for _, x := range d {
				if x <= 1000 {
					s.P99PairedWithin++
				}
			}
		}
	}
}

func (r *report) summary(c, tn string) *summary {
	for i := range r.Summaries {
		if r.Summaries[i].Case == c && r.Summaries[i].Target == tn {
			return &r.Summaries[i]
		}
	}
	return nil
}

func fmtStat(s stat, format string) string {
	return fmt.Sprintf(format+" ("+format+"–"+format+")", s.Med, s.Min, s.Max)
}

func fmtLatency(us float64) string {
	if us >= 1000 {
		return fmt.Sprintf("%.2f ms", us/1000)
	}
	return fmt.Sprintf("%.0f µs", us)
}

// markdown renders the table: per case and target, the median with
// (min–max) over the rounds.
func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Run %s–%s UTC on %s; %d rounds × %s per case and target, %d connections (h2load: 4 × 8 streams), %s backends; load average %.2f at start, %.2f at end.\n\n",
		r.Started.Format("2006-01-02 15:04"), r.Finished.Format("15:04"), r.Machine, r.Rounds, r.Duration, r.Conns, r.Backend, r.LoadStart, r.LoadEnd)
	var vs []string
	// tether's own revision stays in the JSON: the doc speaks of the
	// product, and git dates the figures.
	for _, k := range []string{"haproxy", "nginx", "caddy", "wrk", "h2load"} {
		if v := r.Versions[k]; v != "" {
			vs = append(vs, fmt.Sprintf("%s: `%s`", k, v))
		}
	}
	b.WriteString("Versions: " + strings.Join(vs, "; ") + ".\n\n")
	b.WriteString("| case | proxy | req/s | p50 | p99 | p99 − HAProxy's | CPU µs/req | user / sys µs | ×stdlib | ×HAProxy | load CPU µs/req | wake IPIs /req (load / proxy) | errors |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	order := r.order()
	var others []caseDef // cases against other backends than raw: compact table
	for _, c := range r.Cases {
		if c.Backend != "" && c.Backend != "raw" {
			others = append(others, c)
			continue
		}
		for _, tn := range order {
			s := r.summary(c.Name, tn)
			if s == nil || tn == "tether-base" || tn == "tether-noloop" {
				continue // paired with tether in the notes below the table
			}
			ratio := func(v float64) string {
				if v == 0 {
					return ""
				}
				return fmt.Sprintf("%.2f", v)
			}
			over := ""
			if s.HasP99Ref && tn != "haproxy" {
				over = fmtDelta(s.P99OverHAProxy)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %.1f / %.1f | %s | %s | %.1f | %.3f / %.3f | %d |\n",
				c.Name, tn, fmtStat(s.RPS, "%.0f"),
				fmtLatency(s.P50us.Med), fmt.Sprintf("%s (%s–%s)", fmtLatency(s.P99us.Med), fmtLatency(s.P99us.Min), fmtLatency(s.P99us.Max)), over,
				fmtStat(s.CPU, "%.1f"), s.User.Med, s.Sys.Med, ratio(s.VsFloor), ratio(s.VsHAProxy), s.Load.Med, s.LoadIPIs.Med, s.ProxyIPIs.Med, s.Errors)
		}
	}
	b.WriteString(r.othersTable(others, order))
	var steal, loadSteal []float64
	for _, res := range r.Results {
		steal, loadSteal = append(steal, res.StealPct), append(loadSteal, res.LoadStealPct)
	}
	if len(steal) > 0 {
		ps, ls := statOf(steal), statOf(loadSteal)
		fmt.Fprintf(&b, "\nSteal time (the hypervisor running others while a CPU had work), share of each run, median (max) over the runs kept: proxy CPU %.1f %% (%.1f %%), load CPU %.1f %% (%.1f %%).",
			ps.Med, ps.Max, ls.Med, ls.Max)
		if r.MaxSteal > 0 {
			fmt.Fprintf(&b, " Runs with more than %.1f %% were measured again: %d of %d.", r.MaxSteal, len(r.Stolen), len(r.Stolen)+len(r.Results))
		}
		b.WriteString("\n")
	}
	b.WriteString(r.pairedNotes())
	var sc []string
	for _, s := range r.Summaries {
		if s.Syscalls > 0 {
			sc = append(sc, fmt.Sprintf("%s %s %.1f", s.Case, s.Target, s.Syscalls))
		}
	}
	if len(sc) > 0 {
		b.WriteString("\nSyscalls per request (median, perf stat; a run with -syscalls, whose counting adds to the CPU figures): " + strings.Join(sc, "; ") + ".\n")
	}
	b.WriteString("\nCases:\n\n")
	for _, c := range r.Cases {
		if c.Backend != "" && c.Backend != "raw" {
			continue
		}
		fmt.Fprintf(&b, "- `%s`: %s", c.Name, c.Desc)
		var skipped []string
		for _, tn := range []string{"tether", "stdlib", "haproxy", "nginx", "caddy"} {
			if r.summary(c.Name, tn) == nil {
				skipped = append(skipped, tn)
			}
		}
		switch {
		case len(c.only) > 0:
			b.WriteString(" (tether only; its ratios are to ka-1k's stdlib and HAProxy)")
		case len(skipped) > 0:
			fmt.Fprintf(&b, " (not run: %s)", strings.Join(skipped, ", "))
		}
		b.WriteString(".\n")
	}
	if len(others) > 0 {
		var kinds []string
		for _, c := range others {
			if !slices.Contains(kinds, c.Backend) {
				kinds = append(kinds, c.Backend)
			}
		}
		for _, k := range kinds {
			fmt.Fprintf(&b, "- `<case>.%s`: the same case against %s backends%s.\n", k, k, backendNote[k])
		}
	}
	if len(r.Memory) > 0 {
		n := r.Memory[0].Conns
		fmt.Fprintf(&b, "\nResident memory, idle and with %d idle keep-alive client connections (each served one 1 KiB request), whole process tree (idle: after the race):\n\n", n)
		b.WriteString("| proxy | idle RSS | RSS with connections | PSS with connections | per connection (RSS) |\n|---|---|---|---|---|\n")
		for _, m := range r.Memory {
			fmt.Fprintf(&b, "| %s | %.1f MiB | %.1f MiB | %.1f MiB | %.1f KiB |\n", m.Target, float64(m.IdleRSS)/1024,
				float64(m.LoadedRSS)/1024, float64(m.LoadedPSS)/1024, m.perConn())
		}
		b.WriteString(r.loopMemoryNote())
	}
	if len(r.Burst) > 0 {
		fmt.Fprintf(&b, "\nResident memory around a burst: %d connections opened at once, each sending one 1 KiB request (net/http backends) and then staying open, idle; whole process tree, growth over the idle figure per connection:\n\n", r.Burst[0].Conns)
		b.WriteString("| proxy | idle RSS | peak RSS | RSS 15 s after | per connection | RSS 60 s after | per connection |\n|---|---|---|---|---|---|---|\n")
		for _, m := range r.Burst {
			fmt.Fprintf(&b, "| %s | %.1f MiB | %.1f MiB | %.1f MiB | %.1f KiB | %.1f MiB | %.1f KiB |\n", m.Target, float64(m.IdleRSS)/1024,
				float64(m.PeakRSS)/1024, float64(m.At15RSS)/1024, m.perConn(m.At15RSS), float64(m.At60RSS)/1024, m.perConn(m.At60RSS))
		}
		b.WriteString(r.burstNote())
	}
	return b.String()
}

const (
	beginMarker = "<!-- bench-race:begin (written by make bench-race) -->"
	endMarker   = "<!-- bench-race:end -->"
)

// splice replaces the text between the markers in doc (or appends a
// section with them): the harness rewrites its generated block of
// docs/BENCHMARKS.md in place and leaves the rest of the doc alone.
func splice(doc, body string) string {
	block := beginMarker + "\n" + body + "\n" + endMarker
	i, j := strings.Index(doc, beginMarker), strings.Index(doc, endMarker)
	if i >= 0 && j > i {
		return doc[:i] + block + doc[j+len(endMarker):]
	}
	return strings.TrimRight(doc, "\n") + "\n\n## Race: tether, HAProxy, nginx, Caddy, stdlib (`make bench-race`)\n\n" + block + "\n"
}

func (r *report) write(repo string) error {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	// The raw per-round figures are build output, not documentation.
	if err := os.MkdirAll(filepath.Join(repo, "bin"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(repo, "bin/bench-race.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(repo, "docs/img"), 0o755); err != nil {
		return err
	}
	png, err := r.chart()
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if err := os.WriteFile(filepath.Join(repo, "docs/img/bench-race.png"), png, 0o644); err != nil {
		return err
	}
	mdPath := filepath.Join(repo, "docs/BENCHMARKS.md")
	doc, err := os.ReadFile(mdPath)
	if err != nil {
		return err
	}
	body := r.markdown() + "\n![CPU per request by case and proxy](img/bench-race.png)\n"
	return os.WriteFile(mdPath, []byte(splice(string(doc), body)), 0o644)
}

var palette = map[string]color.RGBA{
	"tether":          {0x1f, 0x77, 0xb4, 0xff},
	"tether-base":     {0xae, 0xc7, 0xe8, 0xff},
	"tether-noloop":   {0x9e, 0xda, 0xe5, 0xff},
	"stdlib":          {0x7f, 0x7f, 0x7f, 0xff},
	"bare-nethttp":    {0xbc, 0xbd, 0x22, 0xff},
	"bare-own":        {0xdb, 0xdb, 0x8d, 0xff},
	"bare-gor":        {0xc4, 0x9c, 0x94, 0xff},
	"bare-loop":       {0x8c, 0x56, 0x4b, 0xff},
	"haproxy":         {0x2c, 0xa0, 0x2c, 0xff},
	"haproxy-nolog":   {0x98, 0xdf, 0x8a, 0xff},
	"tether-nolog":    {0x9e, 0xda, 0xe5, 0xff},
	"nginx":           {0xd6, 0x27, 0x28, 0xff},
	"caddy":           {0x94, 0x67, 0xbd, 0xff},
	"tether-10k":      {0x17, 0xbe, 0xcf, 0xff},
	"tether-cluster3": {0xff, 0x7f, 0x0e, 0xff},
}

// chart draws the median CPU µs per request, one group of bars per case.
func (r *report) chart() ([]byte, error) {
	p := plot.New()
	p.Title.Text = "Proxy CPU per request (median of interleaved rounds; lower is better)"
	p.Y.Label.Text = "CPU µs / request"
	var names []string
	for _, c := range r.Cases {
		names = append(names, c.Name)
	}
	// One bar per (case, target), centred on its case: targets that skip
	// a case leave no gap.
	w := vg.Points(9)
	inLegend := map[string]bool{}
	order := r.order()
	for j, c := range r.Cases {
		var ss []*summary
		for _, tn := range order {
			if s := r.summary(c.Name, tn); s != nil {
				ss = append(ss, s)
			}
		}
		for i, s := range ss {
			bars, err := plotter.NewBarChart(plotter.Values{s.CPU.Med}, w)
			if err != nil {
				return nil, err
			}
			bars.LineStyle.Width = 0
			col, ok := palette[s.Target]
			if !ok {
				col = color.RGBA{0x55, 0x55, 0x55, 0xff} // a target without a colour of its own
			}
			bars.Color = col
			bars.XMin = float64(j)
			bars.Offset = w * vg.Length(float64(i)-float64(len(ss)-1)/2)
			p.Add(bars)
			if !inLegend[s.Target] {
				inLegend[s.Target] = true
				p.Legend.Add(s.Target, bars)
			}
		}
	}
	p.Y.Min, p.Y.Max = 0, p.Y.Max*1.3 // room for the legend
	p.Legend.Top = true
	p.NominalX(names...)
	wt, err := p.WriterTo(11*vg.Inch, 5*vg.Inch, "png")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// roundPairs is, over the rounds both ran, the pairs (a's, b's) of a
// result's figure v for target a in case ca and target b in case cb
// (rounds where b's figure is 0, a failed run, left out). The targets of
// one round ran seconds apart, so a figure compared within a round is less
// at the mercy of the host drifting between rounds than two medians are.
func (r *report) roundPairs(ca, a, cb, b string, v func(result) float64) [][2]float64 {
	bs := map[int]float64{}
	for _, res := range r.Results {
		if res.Case == cb && res.Target == b && v(res) > 0 {
			bs[res.Round] = v(res)
		}
	}
	var out [][2]float64
	for _, res := range r.Results {
		if res.Case == ca && res.Target == a {
			if d, ok := bs[res.Round]; ok {
				out = append(out, [2]float64{v(res), d})
			}
		}
	}
	return out
}

func cpuOf(res result) float64 { return res.CPUusPerReq }
func p99Of(res result) float64 { return res.P99us }

// paired is the per-round ratios of target a's CPU per request over target
// b's, in case ca for a and cb for b.
func (r *report) paired(ca, a, cb, b string) []float64 {
	var out []float64
	for _, p := range r.roundPairs(ca, a, cb, b, cpuOf) {
		out = append(out, p[0]/p[1])
	}
	return out
}

// pairedP99 is the per-round differences of target a's p99 minus
// HAProxy's in case c (µs), over the rounds both ran.
func (r *report) pairedP99(c, a string) []float64 {
	var out []float64
	for _, p := range r.roundPairs(c, a, c, "haproxy", p99Of) {
		if p[0] > 0 {
			out = append(out, p[0]-p[1])
		}
	}
	return out
}

// pairedNotes are the lines after the table: tether's per-round ratios to
// HAProxy, and to tether-base and tether-noloop when the run had them.
func (r *report) pairedNotes() string {
	var vsH, p99H, vsBase, vsNoLoop []string
	for _, c := range r.Cases {
		for _, tn := range []string{"tether", "tether-base", "tether-nolog", "tether-10k", "tether-cluster3"} {
			if s := r.summary(c.Name, tn); s != nil && s.VsHAProxyPaired.Med > 0 {
				st := s.VsHAProxyPaired
				vsH = append(vsH, fmt.Sprintf("%s %s %.2f (%.2f–%.2f)", c.Name, tn, st.Med, st.Min, st.Max))
			}
			if s := r.summary(c.Name, tn); s != nil && s.P99PairedRounds > 0 {
				st := s.P99OverHAProxyPaired
				p99H = append(p99H, fmt.Sprintf("%s %s %s (%s–%s), within +1 ms in %d of %d rounds",
					c.Name, tn, fmtDelta(st.Med), fmtDelta(st.Min), fmtDelta(st.Max), s.P99PairedWithin, s.P99PairedRounds))
			}
		}
		if v := r.paired(c.Name, "tether", c.Name, "tether-base"); len(v) > 0 {
			vsBase = append(vsBase, c.Name+" "+pairedLower(v))
		}
		if v := r.paired(c.Name, "tether", c.Name, "tether-noloop"); len(v) > 0 {
			s := fmt.Sprintf("%s %s", c.Name, pairedLower(v))
			on, off := r.summary(c.Name, "tether"), r.summary(c.Name, "tether-noloop")
			if on != nil && off != nil && off.CPU.Med > 0 {
				s += fmt.Sprintf(", by the medians %.1f against %.1f µs per request (%.0f %% saved)", on.CPU.Med, off.CPU.Med, 100*(1-on.CPU.Med/off.CPU.Med))
			}
			vsNoLoop = append(vsNoLoop, s)
		}
	}
	var b strings.Builder
	if len(vsH) > 0 {
		b.WriteString("\nPaired against HAProxy (median, min–max over the rounds of each round's CPU per request over HAProxy's in the same round; ka-1k's HAProxy for the tether-only cases; tether-nolog against haproxy-nolog): " + strings.Join(vsH, "; ") + ".\n")
	}
	if len(p99H) > 0 {
		b.WriteString("\np99 paired against HAProxy (median, min–max over the rounds of each round's p99 minus HAProxy's in the same round and case): " + strings.Join(p99H, "; ") + ".\n")
	}
	if len(vsBase) > 0 {
		b.WriteString("\ntether against tether-base, paired the same way: " + strings.Join(vsBase, "; ") + ".\n")
	}
	if len(vsNoLoop) > 0 {
		b.WriteString("\nThe own HTTP/1.1 loop: tether against tether-noloop (the same binary with " + noLoopEnv + "), paired the same way: " + strings.Join(vsNoLoop, "; ") + ".\n")
	}
	return b.String()
}

// pairedLower is per-round ratios as median (min–max) and how many were
// below 1 (tether lower).
func pairedLower(v []float64) string {
	st := statOf(v)
	lower := 0
	for _, x := range v {
		if x < 1 {
			lower++
		}
	}
	return fmt.Sprintf("%.3f (%.3f–%.3f), tether lower in %d of %d rounds", st.Med, st.Min, st.Max, lower, len(v))
}

// fmtDelta is a latency difference in µs as signed milliseconds.
func fmtDelta(us float64) string {
	return fmt.Sprintf("%+.2f ms", us/1000)
}

// perConn is the resident memory each idle connection added (KiB).
func (m memResult) perConn() float64 {
	return float64(m.LoadedRSS-m.IdleRSS) / float64(max(1, m.Opened))
}

// loopMemoryNote compares an idle connection's memory with tether's own
// loop and without it (tether-noloop), and with HAProxy's, when the run
// measured them.
func (r *report) loopMemoryNote() string {
	per := map[string]float64{}
	for _, m := range r.Memory {
		if m.Opened > 0 {
			per[m.Target] = m.perConn()
		}
	}
	on, okOn := per["tether"]
	off, okOff := per["tether-noloop"]
	if !okOn || !okOff {
		return ""
	}
	s := fmt.Sprintf("\nAn idle keep-alive connection (after one request) with the own HTTP/1.1 loop: %.1f KiB; without it (net/http's server, tether-noloop): %.1f KiB", on, off)
	if h, ok := per["haproxy"]; ok && h > 0 {
		s += fmt.Sprintf("; HAProxy %.1f KiB (tether %.1f×)", h, on/h)
	}
	return s + ".\n"
}

// burstNote sets tether's burst figures beside its idle connection's cost
// when connections arrive one by one (the memory phase), when the run
// measured both.
func (r *report) burstNote() string {
	var one float64
	for _, m := range r.Memory {
		if m.Target == "tether" && m.Opened > 0 {
			one = m.perConn()
		}
	}
	for _, b := range r.Burst {
		if b.Target != "tether" || one <= 0 {
			continue
		}
		return fmt.Sprintf("\ntether after the burst: %.1f KiB per connection 15 s after, %.1f KiB 60 s after, against %.1f KiB for connections that arrive one by one (%.1f×).\n",
			b.perConn(b.At15RSS), b.perConn(b.At60RSS), one, b.perConn(b.At60RSS)/one)
	}
	return ""
}

// backendNote says what a backend kind answers.
var backendNote = map[string]string{
	"nethttp": " (net/http's server, answering with Content-Length, Content-Type, Date and Server as a real server does)",
}

// othersTable is the compact table of the cases run against other
// backends than the raw ones: each proxy's CPU per request (median) and
// tether's ratio to HAProxy, paired by round.
func (r *report) othersTable(others []caseDef, order []string) string {
	if len(others) == 0 {
		return ""
	}
	var cols []string
	for _, tn := range order {
		for _, c := range others {
			if r.summary(c.Name, tn) != nil {
				cols = append(cols, tn)
				break
			}
		}
	}
	var b strings.Builder
	b.WriteString("\nThe same cases against the other backends, CPU µs per request (median over the rounds) and tether's paired ratio to HAProxy (median, min–max):\n\n| case |")
	for _, tn := range cols {
		b.WriteString(" " + tn + " |")
	}
	b.WriteString(" tether ×HAProxy (paired) | p99 tether / HAProxy |\n|---|")
	b.WriteString(strings.Repeat("---|", len(cols)+2) + "\n")
	for _, c := range others {
		fmt.Fprintf(&b, "| %s |", c.Name)
		for _, tn := range cols {
			if s := r.summary(c.Name, tn); s != nil {
				fmt.Fprintf(&b, " %.1f |", s.CPU.Med)
			} else {
				b.WriteString(" |")
			}
		}
		paired, p99 := "", ""
		if s := r.summary(c.Name, "tether"); s != nil {
			if st := s.VsHAProxyPaired; st.Med > 0 {
				paired = fmt.Sprintf("%.2f (%.2f–%.2f)", st.Med, st.Min, st.Max)
			}
			if h := r.summary(c.Name, "haproxy"); h != nil {
				p99 = fmtLatency(s.P99us.Med) + " / " + fmtLatency(h.P99us.Med)
			}
		}
		fmt.Fprintf(&b, " %s | %s |\n", paired, p99)
	}
	return b.String()
}
