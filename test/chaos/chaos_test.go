package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// chaosConfig: three backends behind a Cookie affinity route; a value that
// does not open answers openFailStatus; drains last longer than the run, so
// a drained destination keeps its sessions.
func chaosConfig(backends map[string]string, listen string) string {
	return fmt.Sprintf(`{
  "Listeners": [ { "Address": "%s" } ],
  "ReverseProxy": %s
}`, listen, chaosReverseProxy(backends, ""))
}

// chaosReverseProxy is the config's ReverseProxy section; set, when not
// "", adds a route of that name (the clients push two such sets in
// turn: the cluster app, which every other check relies on, stays as it is).
func chaosReverseProxy(backends map[string]string, set string) string {
	var ds []string
	for _, id := range destinations {
		ds = append(ds, fmt.Sprintf(`"%s": { "Address": "%s/" }`, id, backends[id]))
	}
	extra := ""
	if set != "" {
		extra = fmt.Sprintf(`, "set-%s": { "ClusterId": "app", "Match": { "Path": "/set-%s/{**rest}" } }`, set, set)
	}
	return fmt.Sprintf(`{
    "Routes": { "all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } }%s },
    "Clusters": { "app": {
      "LoadBalancingPolicy": "RoundRobin", "DrainTimeout": "01:00:00",
      "SessionAffinity": { "Enabled": true, "Policy": "Cookie", "AffinityKeyName": "%s",
                           "FailurePolicy": "Return503Error", "FailureStatusCode": %d },
      "Destinations": { %s } } }
  }`, extra, cookieName, openFailStatus, strings.Join(ds, ", "))
}

// indexedReads: the build under test answers reads with X-Tether-Index
// and waits for the index a read sends (see History.IndexedReads).
const indexedReads = true

// TestChaos runs the nemesis and the clients for the run's duration, heals
// everything, reads every node's final state and checks the history. The
// seed and duration come from -chaos.seed/-chaos.duration or
// TETHER_CHAOS_SEED/TETHER_CHAOS_DURATION.
func TestChaos(t *testing.T) {
	if os.Getenv("TETHER_CHAOS") == "" {
		t.Skip("the fault test runs with TETHER_CHAOS=1 (make chaos)")
	}
	seed, duration := settings()
	t.Logf("chaos: seed %d, duration %s, %d nodes (%d voters); partitions: %v %s", seed, duration, nodes, voters, partitions.on, partitions.why)

	dir, err := os.MkdirTemp("", "tether-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	keep := os.Getenv("TETHER_CHAOS_KEEP") != ""
	t.Cleanup(func() {
		if !keep && !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("chaos: logs and history in %s", dir)
		}
	})
	bin := filepath.Join(dir, "tether")
	// -tags chaosclock: a node's wall clock can be jumped (node/clustertime/offset_chaos.go).
	build := exec.Command("go", "build", "-tags", "chaosclock", "-o", bin, "../../cmd/tether")
	if os.Getenv("TETHER_CHAOS_RACE") != "" {
		build = exec.Command("go", "build", "-tags", "chaosclock", "-race", "-o", bin, "../../cmd/tether")
	}
	if prebuilt := os.Getenv("TETHER_CHAOS_BIN"); prebuilt != "" {
		// Another build (an older commit, say) under the same test.
		build = exec.Command("cp", prebuilt, bin)
	}
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building tether: %v\n%s", err, out)
	}
	os.Chmod(bin, 0o755)

	backends := map[string]string{}
	for _, id := range destinations {
		backends[id] = testutil.NewBackend(t, id).URL()
	}
	c := newCluster(t, bin, dir, func(listen string) string { return chaosConfig(backends, listen) })
	t.Cleanup(func() {
		c.stopAll()
		if partitions.on {
			c.heal()
		}
	})
	var wg sync.WaitGroup
	for _, p := range c.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.start(p); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	formed := time.Now()
	if err := c.settled(90 * time.Second); err != nil {
		t.Fatalf("the cluster did not form: %v", err)
	}
	t.Logf("chaos: formed in %s", time.Since(formed).Round(time.Millisecond))

	h := &History{IndexedReads: indexedReads}
	mon := &monitor{c: c, h: h}
	monCtx, stopMon := context.WithCancel(context.Background())
	monDone := make(chan struct{})
	go func() { mon.run(monCtx); close(monDone) }()
	defer func() { stopMon(); <-monDone }()

	// Clients and nemesis.
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	w := newWorkload(c, h, mon)
	for i, set := range []string{"a", "b"} {
		w.configs[i] = []byte(`{"ReverseProxy": ` + chaosReverseProxy(backends, set) + `}`)
	}
	h.Begin = time.Now()
	var clients sync.WaitGroup
	for i := range 4 {
		clients.Add(1)
		r := rand.New(rand.NewPCG(seed, uint64(i+1)))
		go func() { defer clients.Done(); w.run(ctx, i, r) }()
	}
	nem := &nemesis{c: c, h: h, mon: mon, r: rand.New(rand.NewPCG(seed, 0)), t: t, hold: [2]int{2000, 8000}, gap: [2]int{1000, 3000}}
	if duration < time.Minute {
		// A short run: shorter faults, so that each kind gets a turn.
		nem.hold, nem.gap = [2]int{1000, 5000}, [2]int{500, 1500}
	}
	nem.run(ctx)
	clients.Wait()

	// Heal, let the cluster settle, open values everywhere, read the end state.
	if err := nem.healAll(); err != nil {
		t.Fatal(err)
	}
	if err := c.settled(90 * time.Second); err != nil {
		t.Errorf("the cluster did not settle after the faults: %v", err)
	}
	if err := c.converged(60 * time.Second); err != nil {
		t.Errorf("the nodes' states did not converge: %v", err)
	}
	time.Sleep(stable) // a fixed window: every node counts as stable for the final opens
	h.Healed = time.Now()
	w.probe(rand.New(rand.NewPCG(seed, 98)))
	var seals []Op
	revoked := h.revoked()
	for _, s := range h.seals() {
		if !revoked[keyIDOf(s.Cookie)] {
			seals = append(seals, s)
		}
	}
	sr := rand.New(rand.NewPCG(seed, 99))
	sr.Shuffle(len(seals), func(i, j int) { seals[i], seals[j] = seals[j], seals[i] })
	for _, s := range seals[:min(len(seals), 40)] {
		for _, p := range c.procs {
			w.openValue(-1, p, &s)
		}
	}
	// Values under keys whose revocation was acknowledged: refused everywhere.
	acked := h.revokedAcked()
	var dead []Op
	for _, s := range h.seals() {
		if acked[keyIDOf(s.Cookie)] {
			dead = append(dead, s)
		}
	}
	sr.Shuffle(len(dead), func(i, j int) { dead[i], dead[j] = dead[j], dead[i] })
	for _, s := range dead[:min(len(dead), 10)] {
		for _, p := range c.procs {
			w.record(w.openOp(-1, p, &s, "open-revoked"))
		}
	}
	stopMon()
	<-monDone
	h.Final = map[string]Final{}
	for _, p := range c.procs {
		f, err := finalState(p)
		if err != nil {
			t.Errorf("%s: final state: %v", p.id, err)
			continue
		}
		h.Final[p.id] = f
	}

	vs := Check(h)
	mv, undecided := CheckModel(h, dir)
	vs = append(vs, mv...)
	for _, u := range undecided {
		t.Logf("chaos: porcupine did not decide %s within %s", u, checkTimeout)
	}
	report(t, dir, seed, duration, h, vs)
	if len(vs) > 0 {
		t.Errorf("%d violations", len(vs))
	}
}

// report prints the figures and writes the history.
func report(t *testing.T, dir string, seed uint64, d time.Duration, h *History, vs []Violation) {
	counts := map[string]map[string]int{}
	total := 0
	for _, o := range h.Ops {
		if counts[o.Kind] == nil {
			counts[o.Kind] = map[string]int{}
		}
		counts[o.Kind][o.Type]++
		if o.Kind == "open" && o.Clean {
			counts[o.Kind]["clean"]++
		}
		total++
	}
	var kinds []string
	for k := range counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var ops []string
	for _, k := range kinds {
		c := counts[k]
		s := fmt.Sprintf("%s %d ok/%d fail/%d info", k, c["ok"], c["fail"], c["info"])
		if k == "open" {
			s += fmt.Sprintf(" (%d clean)", c["clean"])
		}
		ops = append(ops, s)
	}
	faults := map[string]int{}
	for _, f := range h.Faults {
		faults[f.Kind]++
	}
	var fs []string
	for k, n := range faults {
		fs = append(fs, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(fs)
	if !partitions.on {
		fs = append(fs, "partition skipped ("+partitions.why+")")
	}
	terms := map[uint64]bool{}
	for _, s := range h.Status {
		terms[s.Term] = true
	}
	changes := 0
	for i := 1; i < len(h.Voters); i++ {
		if !slices.Equal(h.Voters[i-1].Voters, h.Voters[i].Voters) {
			changes++
		}
	}
	fmt.Printf("CHAOS seed %d, %s: operations %d (%s)\n", seed, d, total, strings.Join(ops, "; "))
	fmt.Printf("CHAOS faults %d: %s; status samples %d over %d terms, voter samples %d, voter-set changes %d\n", len(h.Faults), strings.Join(fs, ", "), len(h.Status), len(terms), len(h.Voters), changes)
	_, bad, clean := checkAvailability(h)
	fmt.Printf("CHAOS availability: %d of %d operations on nodes up and in the majority ended in a 5xx or a timeout (budget %.0f%%)\n", bad, clean, availBudget*100)
	fmt.Printf("CHAOS violations %d\n", len(vs))
	for _, v := range vs {
		fmt.Printf("CHAOS violation %s\n", v)
		for _, f := range h.Faults {
			// The faults of the 30 s before it (on its node, if it has one).
			if v.At.IsZero() || f.End.Before(v.At.Add(-30*time.Second)) || f.Start.After(v.At) {
				continue
			}
			if v.Node == "" || slices.Contains(f.Nodes, v.Node) || strings.HasSuffix(f.Kind, "-leader") {
				fmt.Printf("CHAOS   after fault %s..%s %s %v %s\n", f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000"), f.Kind, f.Nodes, f.Note)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d duration %s\n", seed, d)
	for _, f := range h.Faults {
		fmt.Fprintf(&b, "fault %s %-10s %v %s..%s %s\n", f.Start.Format("15:04:05.000"), f.Kind, f.Nodes, f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000"), f.Note)
	}
	for _, o := range h.Ops {
		fmt.Fprintln(&b, o)
	}
	for _, v := range vs {
		fmt.Fprintln(&b, "VIOLATION", v)
	}
	path := filepath.Join(dir, "history.txt")
	os.WriteFile(path, []byte(b.String()), 0o644)
	if js, err := json.MarshalIndent(h, "", " "); err == nil {
		os.WriteFile(filepath.Join(dir, "history.json"), js, 0o644)
	}
	if len(vs) > 0 {
		t.Logf("chaos: history in %s", path)
	}
}

// settled waits until every node names the same live leader.
func (c *cluster) settled(within time.Duration) error {
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		leaders := map[string]bool{}
		ok := true
		for _, p := range c.procs {
			code, b := httpGet(p.adminURL() + "/v1/status")
			var s status
			if code != 200 || json.Unmarshal(b, &s) != nil || s.LeaderID == "" {
				ok = false
				last = fmt.Sprintf("%s: status %d leader %q", p.id, code, s.LeaderID)
				break
			}
			leaders[s.LeaderID] = true
		}
		if ok && len(leaders) == 1 {
			for _, p := range c.procs {
				if st, _ := httpGet(p.adminURL() + "/readyz"); st != 200 {
					ok = false
					last = p.id + " not ready"
				}
			}
			if ok {
				return nil
			}
		} else if ok {
			last = fmt.Sprintf("leaders %v", leaders)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("after %s: %s", within, last)
}

// converged waits until every node holds the same keys, drains and
// config versions, and applied the same config version.
func (c *cluster) converged(within time.Duration) error {
	deadline := time.Now().Add(within)
	var diff string
	for time.Now().Before(deadline) {
		var first *Final
		same := true
		for _, p := range c.procs {
			f, err := finalState(p)
			if err != nil {
				same, diff = false, err.Error()
				break
			}
			if first == nil {
				first = &f
			} else if !reflect.DeepEqual(*first, f) {
				same, diff = false, fmt.Sprintf("%s differs: %v vs %v", p.id, f, *first)
				break
			}
		}
		if same {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("after %s: %s", within, diff)
}

func finalState(p *proc) (Final, error) {
	f := Final{Keys: map[string]string{}, Drains: map[string]bool{}}
	code, b := httpGet(p.adminURL() + "/v1/keyring")
	var kr struct {
		Keys []struct {
			ID, State                   string
			Created, Activates, Expires time.Time
		}
	}
	if code != 200 || json.Unmarshal(b, &kr) != nil {
		return f, fmt.Errorf("GET /v1/keyring: %d", code)
	}
	f.Times = map[string]KeyTimes{}
	for _, k := range kr.Keys {
		f.Keys[k.ID] = k.State
		f.Times[k.ID] = KeyTimes{Created: k.Created, Activates: k.Activates, Expires: k.Expires}
	}
	code, b = httpGet(p.adminURL() + "/v1/clusters/app/destinations")
	var ds struct {
		Destinations []struct {
			ID       string
			Draining bool
		}
	}
	if code != 200 || json.Unmarshal(b, &ds) != nil {
		return f, fmt.Errorf("GET destinations: %d", code)
	}
	for _, d := range ds.Destinations {
		f.Drains[d.ID] = d.Draining
	}
	code, b = httpGet(p.adminURL() + "/v1/status")
	var st struct {
		ConfigVersion uint64 `json:"config_version"`
	}
	if code != 200 || json.Unmarshal(b, &st) != nil {
		return f, fmt.Errorf("GET /v1/status: %d", code)
	}
	f.ConfigVersion = st.ConfigVersion
	code, b = httpGet(p.adminURL() + "/v1/config/history")
	var hist struct {
		Versions []ConfigEntry
	}
	if code != 200 || json.Unmarshal(b, &hist) != nil {
		return f, fmt.Errorf("GET /v1/config/history: %d", code)
	}
	f.Configs = hist.Versions
	return f, nil
}

// nemesis injects one fault at a time, each for a few seconds, with a
// short quiet gap, and brings every node back before the next.
type nemesis struct {
	t   *testing.T
	c   *cluster
	h   *History
	mon *monitor
	r   *rand.Rand
	// hold and gap: a fault's length and the quiet time after it, in ms (min, max).
	hold, gap [2]int
}

func (n *nemesis) run(ctx context.Context) {
	kinds := []string{"kill", "pause", "restart", "leave-join", "address", "kill-leader", "pause-leader", "clock-leader"}
	if partitions.on {
		kinds = append(kinds, "partition-one", "partition-leader", "partition-split")
	}
	if only := os.Getenv("TETHER_CHAOS_FAULTS"); only != "" {
		// A subset of the faults, e.g. "clock-leader" to look at one rule.
		kinds = slices.DeleteFunc(kinds, func(k string) bool { return !slices.Contains(strings.Split(only, ","), k) })
		if len(kinds) == 0 {
			n.t.Errorf("TETHER_CHAOS_FAULTS=%s names no fault this run can inject", only)
			return
		}
	}
	for ctx.Err() == nil {
		if !n.sleep(ctx, n.ms(n.gap)) {
			return
		}
		kind := kinds[n.r.IntN(len(kinds))]
		target := n.c.procs[n.r.IntN(len(n.c.procs))]
		if strings.HasSuffix(kind, "-leader") {
			if l := n.leader(); l != nil {
				target = l
			}
		}
		f := Fault{Kind: kind, Nodes: []string{target.id}, Start: time.Now()}
		hold := n.ms(n.hold)
		switch kind {
		case "kill", "kill-leader":
			n.c.kill(target)
			n.sleep(ctx, hold)
			n.must(n.c.start(target))
		case "pause", "pause-leader":
			n.c.signal(target, syscall.SIGSTOP)
			n.sleep(ctx, hold)
			n.c.signal(target, syscall.SIGCONT)
		case "clock-leader":
			// The leader's wall clock jumps (ahead past a key's lifetime and
			// retention, or back): the times it commits must not make the
			// others drop keys they still need.
			jump := []string{"2500h", "100h", "-3h", "30m"}[n.r.IntN(4)]
			f.Note = "wall clock " + jump
			n.must(os.WriteFile(target.clockPath, []byte(jump), 0o644))
			n.sleep(ctx, hold)
			n.must(os.WriteFile(target.clockPath, []byte("0"), 0o644))
		case "restart":
			n.c.stop(target)
			n.must(n.c.start(target))
		case "address":
			n.c.stop(target)
			target.ip = fmt.Sprintf("127.0.0.%d", n.c.nextIP)
			n.c.nextIP++
			f.Note = "raft and gossip now on " + target.ip
			n.must(n.c.start(target))
		case "leave-join":
			code, b := httpPost(target.adminURL() + "/v1/leave")
			f.Note = fmt.Sprintf("leave: %d %s", code, strings.Join(strings.Fields(string(b)), " "))
			if code != 200 {
				// Refused (no leader, or quorum): it is still a member,
				// so it keeps its data; this was a restart.
				f.Note += "; restarted with its data"
				n.c.stop(target)
			} else {
				if !n.c.wait(target, 30*time.Second) {
					n.c.stop(target)
					f.Note += "; did not exit after leaving"
				}
				// Out of the Raft configuration: it joins again as a new node.
				os.RemoveAll(target.dataDir)
			}
			n.must(n.c.start(target))
		case "partition-one", "partition-leader":
			n.must(n.c.partition([]string{target.id}))
			n.sleep(ctx, hold)
			n.must(n.c.heal())
		case "partition-split":
			ids := []string{}
			for _, i := range n.r.Perm(len(n.c.procs))[:2] {
				ids = append(ids, n.c.procs[i].id)
			}
			f.Nodes = ids
			n.must(n.c.partition(ids))
			n.sleep(ctx, hold)
			n.must(n.c.heal())
		}
		f.End = time.Now()
		n.h.fault(f)
	}
}

func (n *nemesis) ms(r [2]int) time.Duration {
	return time.Duration(r[0]+n.r.IntN(r[1]-r[0])) * time.Millisecond
}

func (n *nemesis) must(err error) {
	if err != nil {
		n.t.Error("nemesis:", err)
	}
}

// sleep waits d or until ctx ends; false when ctx ended.
func (n *nemesis) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (n *nemesis) leader() *proc {
	n.mon.mu.Lock()
	defer n.mon.mu.Unlock()
	for id, s := range n.mon.last {
		if s.State == "Leader" {
			return n.c.byID(id)
		}
	}
	return nil
}

// healAll ends every fault: partitions healed, paused nodes resumed, stopped ones started.
func (n *nemesis) healAll() error {
	if partitions.on {
		if err := n.c.heal(); err != nil {
			return err
		}
	}
	for _, p := range n.c.procs {
		if err := os.WriteFile(p.clockPath, []byte("0"), 0o644); err != nil {
			return err
		}
		n.c.signal(p, syscall.SIGCONT)
		n.c.mu.Lock()
		running := p.running
		n.c.mu.Unlock()
		if !running {
			if err := n.c.start(p); err != nil {
				return err
			}
		}
	}
	return nil
}
