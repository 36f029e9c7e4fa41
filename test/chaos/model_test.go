package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The bounds the model checks hold the cluster to.
const (
	// readLag: a read on a node up and in the majority reflects every write
	// acknowledged this long before it was sent (followers apply a commit
	// a moment after the leader).
	readLag = 2 * time.Second
	// revokeBound: once a revocation is acknowledged, a node up and in the
	// majority refuses values under the key within this bound.
	revokeBound = 5 * time.Second
	// drainBound: once a drain (undrain) is acknowledged, a node up and in
	// the majority gives the destination no new session (gives it new
	// sessions again) within this bound.
	drainBound = 5 * time.Second
	// liveBound: after the last fault healed, a rotation is active on every
	// node, and a value sealed on any node opens on every node, within it.
	liveBound = 5 * time.Second
	// pendingActivation: a rotation's key is installed with its activation
	// a day ahead, and activated once every member holds it.
	pendingActivation = 24 * time.Hour
	// clockSlack: how far a committed key time may stray from the test's
	// own clock (the nodes run on the same machine).
	clockSlack = time.Minute
	// availBudget: the share of operations sent to nodes up and in the
	// majority that may end in a 5xx or a timeout (an election after the
	// leader failed, a forwarded write whose leader was lost mid-way).
	availBudget = 0.02
	// checkTimeout bounds porcupine's search on one key or destination.
	checkTimeout = 20 * time.Second
)

// Rules of the model check.
const (
	RuleNotLinearizable = "history of a key or a drain is not linearizable"
	RuleReadYourWrites  = "a read missed the client's own acknowledged write"
	RuleMonotonicReads  = "a client's reads went back"
	RuleNeverActivated  = "an acknowledged rotation never activated"
	RuleLiveness        = "after the last fault healed, a rotation or a value did not reach every node within 5 s"
	RuleSchedule        = "a key's committed times leave the rotation schedule"
	RuleRevocation      = "a value under a revoked key opened after the revocation bound"
	RuleDrainDataPath   = "a new session contradicts an acknowledged drain or undrain"
	RuleAvailability    = "5xx and timeouts on nodes up and in the majority beyond the budget"
	RuleConfigBack      = "a node's applied config version went back"
	RuleConfigAhead     = "a node applied a config version no push had made"
	RuleConfigLost      = "an acknowledged config push is not the committed version its answer named"
	RuleConfigIfMatch   = "a config push with If-Match committed on top of another version"
	RuleConfigBehind    = "a node did not apply the last committed config version by the end"
)

// Key states as GET /v1/keyring shows them; absent is a key the node does not list.
const absent = ""

// keyInput is one operation on one key, for porcupine.
type keyInput struct {
	kind    string // create (an acknowledged rotation), revoke, read
	known   bool   // the outcome is known (ok); else the write may or may not have happened
	observe string // read: the state the answer showed (absent: not listed)
}

// keyModel: one key of the keyring. It is created (by a client's rotation,
// or by the leader: a first key, a replacement after a revocation) as
// installed, activates (active, later inactive once superseded; active
// again if the newer key is revoked), may expire, and is revoked only by a
// revocation, for good. No key disappears within a run (pruning takes the
// retention period, days). clientKey: the key is the answer of a client's
// rotation, so it cannot exist before that rotation.
func keyModel(clientKey bool) porcupine.Model {
	rank := map[string]int{"installed": 1, "active": 2, "inactive": 2, "expired": 3}
	can := func(from, to string) bool {
		switch {
		case from == to:
			return true
		case to == "revoked" || from == "revoked" || to == absent:
			return false // only a revocation revokes; nothing disappears
		case from == absent:
			return !clientKey && rank[to] > 0
		}
		return rank[to] >= rank[from] && rank[to] > 0
	}
	m := porcupine.NondeterministicModel{
		Init: func() []any { return []any{absent} },
		Step: func(state, input, _ any) []any {
			s, in := state.(string), input.(keyInput)
			switch in.kind {
			case "create":
				if s != absent {
					return nil
				}
				if !in.known {
					return []any{s, "installed"}
				}
				return []any{"installed"}
			case "revoke":
				if !in.known {
					return []any{s, "revoked"}
				}
				if s == absent && clientKey {
					return nil
				}
				return []any{"revoked"}
			case "read":
				if can(s, in.observe) {
					return []any{in.observe}
				}
			}
			return nil
		},
		DescribeOperation: func(input, _ any) string {
			in := input.(keyInput)
			switch {
			case in.kind == "read":
				return fmt.Sprintf("read -> %q", in.observe)
			case !in.known:
				return in.kind + " (unknown outcome)"
			}
			return in.kind
		},
		DescribeState: func(state any) string { return fmt.Sprintf("%q", state) },
	}
	return m.ToModel()
}

// drainInput is one operation on one destination's drain register.
type drainInput struct {
	write bool // a drain (value true) or undrain (false); else a read
	value bool
	known bool
}

// drainModel: a destination's drain is a register, false at the start.
var drainModel = drainSpec.ToModel()

var drainSpec = porcupine.NondeterministicModel{
	Init: func() []any { return []any{false} },
	Step: func(state, input, _ any) []any {
		s, in := state.(bool), input.(drainInput)
		switch {
		case in.write && in.known:
			return []any{in.value}
		case in.write:
			return []any{s, in.value}
		case in.value == s:
			return []any{s}
		}
		return nil
	},
	DescribeOperation: func(input, _ any) string {
		in := input.(drainInput)
		switch {
		case !in.write:
			return fmt.Sprintf("read -> %v", in.value)
		case !in.known:
			return fmt.Sprintf("write %v (unknown outcome)", in.value)
		}
		return fmt.Sprintf("write %v", in.value)
	},
	DescribeState: func(state any) string { return fmt.Sprint(state) },
}

// porcupineOps turns the history into one porcupine history per key and
// per destination. Writes enter with their outcome (ok: known, info:
// unknown, returning infoHorizon after the client gave up: it may take
// effect at any moment until then, or never; fail: left out, nothing
// happened); reads enter
// when they were answered by a node up and in the majority, sent readLag
// earlier than they were (the follower's apply lag).
func porcupineOps(h *History) (keys, drains map[string][]porcupine.Operation, clientKeys map[string]bool) {
	keys, drains, clientKeys = map[string][]porcupine.Operation{}, map[string][]porcupine.Operation{}, map[string]bool{}
	var seen []string // every key any answer listed
	seenSet := map[string]bool{}
	note := func(id string) {
		if id != "" && !seenSet[id] {
			seenSet[id] = true
			seen = append(seen, id)
		}
	}
	for _, o := range h.Ops {
		switch {
		case o.Kind == "rotate" && o.Type == "ok":
			clientKeys[o.Result] = true
			note(o.Result)
		case o.Kind == "revoke" && o.Type != "fail":
			note(o.Arg)
		case o.Kind == "read" && o.Type == "ok":
			for id := range o.Keys {
				note(id)
			}
		}
	}
	sort.Strings(seen)
	ret := func(o Op) int64 {
		if o.Type == "ok" {
			return o.End.UnixNano()
		}
		return o.End.Add(infoHorizon).UnixNano()
	}
	for _, o := range h.Ops {
		if o.Type == "fail" {
			continue
		}
		switch o.Kind {
		case "rotate":
			if o.Type == "ok" {
				keys[o.Result] = append(keys[o.Result], porcupine.Operation{ClientId: o.Client + 1, Input: keyInput{kind: "create", known: true}, Call: o.Start.UnixNano(), Return: ret(o)})
			}
			// A rotation of unknown outcome names no key: it constrains
			// nothing, as the leader makes keys of its own too.
		case "revoke":
			keys[o.Arg] = append(keys[o.Arg], porcupine.Operation{ClientId: o.Client + 1, Input: keyInput{kind: "revoke", known: o.Type == "ok"}, Call: o.Start.UnixNano(), Return: ret(o)})
		case "read":
			if o.Type != "ok" || !o.Clean {
				continue
			}
			for _, id := range seen {
				keys[id] = append(keys[id], porcupine.Operation{ClientId: o.Client + 1, Input: keyInput{kind: "read", known: true, observe: o.Keys[id]}, Call: o.Start.Add(-readLag).UnixNano(), Return: o.End.UnixNano()})
			}
		case "drain", "undrain":
			drains[o.Arg] = append(drains[o.Arg], porcupine.Operation{ClientId: o.Client + 1, Input: drainInput{write: true, value: o.Kind == "drain", known: o.Type == "ok"}, Call: o.Start.UnixNano(), Return: ret(o)})
		case "dests":
			if o.Type != "ok" || !o.Clean {
				continue
			}
			for d, v := range o.Drains {
				drains[d] = append(drains[d], porcupine.Operation{ClientId: o.Client + 1, Input: drainInput{value: v, known: true}, Call: o.Start.Add(-readLag).UnixNano(), Return: o.End.UnixNano()})
			}
		}
	}
	return keys, drains, clientKeys
}

// checkLinearizable runs porcupine on every key and destination. vizDir,
// when set, receives an HTML visualization of each history it rejects.
func checkLinearizable(h *History, vizDir string) (out []Violation, undecided []string) {
	keys, drains, clientKeys := porcupineOps(h)
	run := func(what string, m porcupine.Model, ops []porcupine.Operation) {
		res, info := porcupine.CheckOperationsVerbose(m, ops, checkTimeout)
		switch res {
		case porcupine.Unknown:
			undecided = append(undecided, what)
		case porcupine.Illegal:
			v := Violation{Rule: RuleNotLinearizable, Detail: fmt.Sprintf("%s: %d operations, no order explains them: %s", what, len(ops), describe(m, ops))}
			if vizDir != "" {
				path := fmt.Sprintf("%s/linearizability-%s.html", vizDir, strings.NewReplacer(" ", "-", "/", "-").Replace(what))
				if porcupine.VisualizePath(m, info, path) == nil {
					v.Detail += " (see " + path + ")"
				}
			}
			out = append(out, v)
		}
	}
	for _, id := range sortedKeys(keys) {
		run("key "+id, keyModel(clientKeys[id]), keys[id])
	}
	for _, d := range sortedKeys(drains) {
		run("drain of "+d, drainModel, drains[d])
	}
	return out, undecided
}

// describe lists a short history in time order (for the report).
func describe(m porcupine.Model, ops []porcupine.Operation) string {
	sorted := append([]porcupine.Operation(nil), ops...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
	var b []string
	for _, o := range sorted {
		end := time.Unix(0, o.Return).UTC().Format("15:04:05.000")
		b = append(b, fmt.Sprintf("c%d %s [%s..%s]", o.ClientId-1, m.DescribeOperation(o.Input, o.Output), time.Unix(0, o.Call).UTC().Format("15:04:05.000"), end))
		if len(b) == 12 && len(sorted) > 12 {
			b = append(b, fmt.Sprintf("... %d more", len(sorted)-12))
			break
		}
	}
	return strings.Join(b, "; ")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// stateRank orders the key states a client's later read may not go back from.
var stateRank = map[string]int{absent: 0, "installed": 1, "active": 2, "inactive": 2, "expired": 3, "revoked": 4}

// checkSessions: read-your-writes and monotonic reads per client. A read
// on the node that answered the client's write, in the same process, must
// show it (a follower answers a forwarded write only once it applied it);
// a read whose answer carries X-Tether-Index at or past the write's index
// must show it on any node. A client's reads on one node in one process,
// or carrying indexes in order, never go back (a key no longer listed, a
// revoked key no longer revoked, an active key installed again), and a read
// answered with an index below the one the client sent is refused.
func checkSessions(h *History) []Violation {
	var out []Violation
	byClient := map[int][]Op{}
	for _, o := range h.Ops {
		if o.Client >= 0 {
			byClient[o.Client] = append(byClient[o.Client], o)
		}
	}
	clients := make([]int, 0, len(byClient))
	for c := range byClient {
		clients = append(clients, c)
	}
	sort.Ints(clients)
	drainWrites := map[string][]Op{}
	for _, o := range h.Ops {
		if (o.Kind == "drain" || o.Kind == "undrain") && o.Type != "fail" {
			drainWrites[o.Arg] = append(drainWrites[o.Arg], o)
		}
	}
	for _, c := range clients {
		ops := byClient[c]
		sort.SliceStable(ops, func(i, j int) bool { return ops[i].Start.Before(ops[j].Start) })
		var writes []Op // the client's acknowledged writes so far
		var reads []Op  // its answered keyring reads so far
		for _, r := range ops {
			if r.Type != "ok" {
				continue
			}
			switch r.Kind {
			case "rotate", "revoke", "drain", "undrain":
				writes = append(writes, r)
				continue
			case "read", "dests":
			default:
				continue
			}
			if h.IndexedReads && r.Index == 0 {
				out = append(out, Violation{Rule: RuleMonotonicReads, Detail: fmt.Sprintf("%s answered without X-Tether-Index", r), At: r.Start, Node: r.Node})
			}
			if r.MinIndex > 0 && r.Index > 0 && r.Index < r.MinIndex {
				out = append(out, Violation{Rule: RuleMonotonicReads, Detail: fmt.Sprintf("%s answered index %d, below the %d the client sent", r, r.Index, r.MinIndex), At: r.Start, Node: r.Node})
			}
			for _, w := range writes {
				if r.Start.Before(w.End) {
					continue
				}
				sameProc := w.Node == r.Node && w.Epoch == r.Epoch && w.Epoch > 0
				byIndex := w.Index > 0 && r.Index >= w.Index
				if !sameProc && !byIndex {
					continue
				}
				if d := missedWrite(w, r, drainWrites); d != "" {
					out = append(out, Violation{Rule: RuleReadYourWrites, Detail: fmt.Sprintf("%s after %s: %s", r, w, d), At: r.Start, Node: r.Node})
				}
			}
			if r.Kind != "read" {
				continue
			}
			for _, p := range reads {
				sameProc := p.Node == r.Node && p.Epoch == r.Epoch && p.Epoch > 0
				byIndex := p.Index > 0 && r.Index >= p.Index
				if !sameProc && !byIndex {
					continue
				}
				for _, id := range sortedKeys(p.Keys) {
					if stateRank[r.Keys[id]] < stateRank[p.Keys[id]] && !(p.Keys[id] == "inactive" && r.Keys[id] == "active") {
						out = append(out, Violation{Rule: RuleMonotonicReads, Detail: fmt.Sprintf("%s shows key %s %q after %s showed it %q", r, id, r.Keys[id], p, p.Keys[id]), At: r.Start, Node: r.Node})
					}
				}
			}
			reads = append(reads, r)
		}
	}
	return out
}

// missedWrite says how read r fails to show the client's write w ("" if it shows it).
func missedWrite(w, r Op, drainWrites map[string][]Op) string {
	switch {
	case w.Kind == "rotate" && r.Kind == "read":
		if _, ok := r.Keys[w.Result]; !ok {
			return "key " + w.Result + " not listed"
		}
	case w.Kind == "revoke" && r.Kind == "read":
		if st := r.Keys[w.Arg]; st != "revoked" {
			return fmt.Sprintf("key %s is %q, not revoked", w.Arg, st)
		}
		for _, id := range w.Names {
			if _, ok := r.Keys[id]; !ok && id != "" {
				return "key " + id + ", which the revocation's answer named, not listed"
			}
		}
	case (w.Kind == "drain" || w.Kind == "undrain") && r.Kind == "dests":
		for _, p := range drainWrites[w.Arg] {
			if p.Start != w.Start && p.Start.Before(r.End) && p.End.After(w.Start) {
				return "" // another write to it overlapped: no single expected value
			}
		}
		if got, ok := r.Drains[w.Arg]; ok && got != (w.Kind == "drain") {
			return fmt.Sprintf("%s draining=%v", w.Arg, got)
		}
	}
	return ""
}

// checkLiveness: every acknowledged rotation activated by the end (unless
// revoked); after the last fault healed, the probe's rotation was active on
// every node and each probe value opened on every node within liveBound;
// every key's committed times lie within the run (a key created or
// activating far ahead stops automatic rotation, one expiring early drops
// values).
func checkLiveness(h *History) []Violation {
	var out []Violation
	nodes := sortedKeys(h.Final)
	for _, o := range h.Ops {
		if o.Kind != "rotate" || o.Type != "ok" {
			continue
		}
		for _, n := range nodes {
			if st, ok := h.Final[n].Keys[o.Result]; ok && st == "installed" {
				out = append(out, Violation{Rule: RuleNeverActivated, Detail: fmt.Sprintf("%s: key %s still installed on %s at the end", o, o.Result, n), At: o.Start, Node: n})
				break
			}
		}
	}
	if !h.Healed.IsZero() {
		probes := 0
		for _, o := range h.Ops {
			if o.Kind != "probe-active" && o.Kind != "probe-open" {
				continue
			}
			probes++
			if o.Type != "ok" || o.End.Sub(o.Start) > liveBound {
				out = append(out, Violation{Rule: RuleLiveness, Detail: o.String(), At: o.Start, Node: o.Node})
			}
		}
		if probes == 0 {
			out = append(out, Violation{Rule: RuleLiveness, Detail: "the cluster healed but no probe ran"})
		}
	}
	if len(h.Final) > 0 && !h.Begin.IsZero() {
		lo, hi := h.Begin.Add(-clockSlack), lastTime(h).Add(clockSlack)
		for _, n := range nodes {
			for _, id := range sortedKeys(h.Final[n].Times) {
				kt := h.Final[n].Times[id]
				switch {
				case kt.Created.After(hi):
					out = append(out, Violation{Rule: RuleSchedule, Detail: fmt.Sprintf("key %s on %s created at %s, after the run ended (%s)", id, n, kt.Created.UTC().Format(time.RFC3339), hi.UTC().Format(time.RFC3339)), Node: n})
				case kt.Activates.After(hi.Add(pendingActivation)) && h.Final[n].Keys[id] != "revoked":
					out = append(out, Violation{Rule: RuleSchedule, Detail: fmt.Sprintf("key %s on %s activates at %s, after the run ended (%s): automatic rotation waits for it", id, n, kt.Activates.UTC().Format(time.RFC3339), hi.UTC().Format(time.RFC3339)), Node: n})
				case !kt.Expires.IsZero() && kt.Created.After(lo) && kt.Expires.Before(hi.Add(24*time.Hour)):
					out = append(out, Violation{Rule: RuleSchedule, Detail: fmt.Sprintf("key %s on %s, created during the run, expires at %s", id, n, kt.Expires.UTC().Format(time.RFC3339)), Node: n})
				}
				if st := h.Final[n].Keys[id]; st == "expired" {
					out = append(out, Violation{Rule: RuleSchedule, Detail: fmt.Sprintf("key %s expired on %s within the run", id, n), Node: n})
				}
			}
		}
	}
	return out
}

func lastTime(h *History) time.Time {
	var t time.Time
	for _, o := range h.Ops {
		if o.End.After(t) {
			t = o.End
		}
	}
	if h.Healed.After(t) {
		t = h.Healed
	}
	return t
}

// checkRevocation: a value under a key whose revocation was acknowledged
// does not open on a node up and in the majority once revokeBound passed.
func checkRevocation(h *History) []Violation {
	acked := map[string]time.Time{}
	for _, o := range h.Ops {
		if o.Kind == "revoke" && o.Type == "ok" {
			if t, ok := acked[o.Arg]; !ok || o.End.Before(t) {
				acked[o.Arg] = o.End
			}
		}
	}
	var out []Violation
	for _, o := range h.Ops {
		if (o.Kind != "open" && o.Kind != "open-revoked") || o.Type != "ok" || !o.Clean {
			continue
		}
		kid := keyIDOf(o.Cookie)
		if t, ok := acked[kid]; ok && o.Start.After(t.Add(revokeBound)) {
			out = append(out, Violation{Rule: RuleRevocation, Detail: fmt.Sprintf("%s: key %s revoked (acknowledged) at %s", o, kid, t.Format("15:04:05.000")), At: o.Start, Node: o.Node})
		}
	}
	return out
}

// infoHorizon: how long after its end a write of unknown outcome may still
// take effect (an entry a cut-off leader held, committed by the next
// leader once the fault heals: every fault here heals within seconds, the
// client gives up after 15 s). Without a bound, each such write stays
// pending to the end of the history and porcupine's search on a long run
// does not finish.
const infoHorizon = 30 * time.Second

// knownDrain says whether destination d was known drained (1), known
// undrained (-1) or neither (0) at t: the last acknowledged write to it
// ended drainBound before t, and no other write that was not refused could
// have taken effect after it and before t. No write at all: undrained.
func knownDrain(writes []Op, t time.Time) int {
	var last *Op
	for i := range writes {
		w := &writes[i]
		if w.Type == "ok" && !w.End.Add(drainBound).After(t) && (last == nil || w.End.After(last.End)) {
			last = w
		}
	}
	for i := range writes {
		w := &writes[i]
		if w == last || !w.Start.Before(t) {
			continue
		}
		end := w.End
		if w.Type != "ok" {
			end = end.Add(infoHorizon)
		}
		if last == nil || end.After(last.Start) {
			return 0
		}
	}
	switch {
	case last == nil:
		return -1
	case last.Kind == "drain":
		return 1
	}
	return -1
}

// checkDrainDataPath: no new session (a request without a cookie) on a
// node up and in the majority lands on a destination known drained, and
// none is refused for want of a destination while one is known undrained.
func checkDrainDataPath(h *History) []Violation {
	writes := map[string][]Op{}
	for _, o := range h.Ops {
		if (o.Kind == "drain" || o.Kind == "undrain") && o.Type != "fail" {
			writes[o.Arg] = append(writes[o.Arg], o)
		}
	}
	var out []Violation
	for _, o := range h.Ops {
		if o.Kind != "seal" || !o.Clean {
			continue
		}
		switch {
		case o.Type == "ok":
			if knownDrain(writes[o.Result], o.Start) == 1 {
				out = append(out, Violation{Rule: RuleDrainDataPath, Detail: fmt.Sprintf("%s: a new session on %s, drained (acknowledged) more than %s before", o, o.Result, drainBound), At: o.Start, Node: o.Node})
			}
		case o.Status == 503:
			var open []string
			for _, d := range destinations {
				if knownDrain(writes[d], o.Start) == -1 {
					open = append(open, d)
				}
			}
			if len(open) > 0 {
				out = append(out, Violation{Rule: RuleDrainDataPath, Detail: fmt.Sprintf("%s: refused a new session while %v were undrained", o, open), At: o.Start, Node: o.Node})
			}
		}
	}
	return out
}

// checkAvailability: among operations sent to nodes up and in the
// majority, the share that ended in a 5xx, a timeout or a refused or lost
// connection stays within availBudget. It returns the figures for the report too.
func checkAvailability(h *History) (out []Violation, bad, total int) {
	var worst []string
	for _, o := range h.Ops {
		if !o.Clean || strings.HasPrefix(o.Kind, "probe") || o.Kind == "seal" && o.Status == 503 {
			continue // a new session refused for want of a destination: the drain rule judges it
		}
		total++
		// A 5xx, a timeout, a connection refused or lost.
		if o.Type != "ok" && (o.Status >= 500 && o.Status != openFailStatus || o.Status == 0 && o.Err != "") {
			bad++
			if len(worst) < 5 {
				worst = append(worst, o.String())
			}
		}
	}
	if total > 0 && float64(bad) > availBudget*float64(total) {
		out = append(out, Violation{Rule: RuleAvailability, Detail: fmt.Sprintf("%d of %d operations (budget %.0f%%), e.g. %s", bad, total, availBudget*100, strings.Join(worst, "; "))})
	}
	return out, bad, total
}

// checkConfig: every node walks the committed sequence of config
// versions forward. Within one process a node's applied version (its
// /v1/status config_version, sampled over time) never goes back; it is
// never past the versions the pushes sent by then could have made (each
// push or rollback makes at most one), nor past the last version
// committed; each acknowledged push is, at the end, the version its
// answer named with the summary it answered (while the history keeps it),
// no two acknowledged pushes share a version, and one sent with If-Match
// N is version N+1. A node that applied version V thus applied a prefix
// of the committed sequence, in order, possibly skipping some; by the end
// every node applied the last one.
func checkConfig(h *History) []Violation {
	var out []Violation
	var sent []time.Time // when each push that may have happened was sent
	for _, o := range h.Ops {
		if o.Kind == "push" && o.Type != "fail" {
			sent = append(sent, o.Start)
		}
	}
	sort.Slice(sent, func(i, j int) bool { return sent[i].Before(sent[j]) })
	var committed uint64 // the last version committed, as the end state lists it
	var final []ConfigEntry
	for _, n := range sortedKeys(h.Final) {
		if cs := h.Final[n].Configs; len(cs) > 0 && cs[0].Version >= committed {
			committed, final = cs[0].Version, cs
		}
	}
	byNode := map[string][]Sample{}
	for _, s := range h.Status {
		byNode[s.Node] = append(byNode[s.Node], s)
	}
	for _, n := range sortedKeys(byNode) {
		ss := byNode[n]
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].At.Before(ss[j].At) })
		for i, s := range ss {
			if i > 0 && ss[i-1].Epoch == s.Epoch && s.ConfigVersion < ss[i-1].ConfigVersion {
				out = append(out, Violation{Rule: RuleConfigBack, Detail: fmt.Sprintf("%s: version %d at %s, after %d at %s in the same process", n, s.ConfigVersion, s.At.Format("15:04:05.000"), ss[i-1].ConfigVersion, ss[i-1].At.Format("15:04:05.000")), At: s.At, Node: n})
			}
			if s.ConfigVersion == 0 {
				continue
			}
			made := sort.Search(len(sent), func(i int) bool { return sent[i].After(s.At) })
			if s.ConfigVersion > uint64(made) || len(h.Final) > 0 && s.ConfigVersion > committed {
				out = append(out, Violation{Rule: RuleConfigAhead, Detail: fmt.Sprintf("%s: version %d at %s, when %d pushes had been sent and %d versions were committed by the end", n, s.ConfigVersion, s.At.Format("15:04:05.000"), made, committed), At: s.At, Node: n})
			}
		}
	}
	for _, n := range sortedKeys(h.Final) {
		if v := h.Final[n].ConfigVersion; v != committed {
			out = append(out, Violation{Rule: RuleConfigBehind, Detail: fmt.Sprintf("%s applied version %d, and %d is the last committed", n, v, committed), Node: n})
		}
	}
	kept := map[uint64]string{}
	for _, e := range final {
		kept[e.Version] = e.Summary
	}
	acked := map[uint64]Op{}
	for _, o := range h.Ops {
		if o.Kind != "push" || o.Type != "ok" {
			continue
		}
		if p, dup := acked[o.Version]; dup {
			out = append(out, Violation{Rule: RuleConfigLost, Detail: fmt.Sprintf("%s and %s were both answered version %d", p, o, o.Version), At: o.Start, Node: o.Node})
		}
		acked[o.Version] = o
		if o.IfVersion != 0 && o.Version != o.IfVersion+1 {
			out = append(out, Violation{Rule: RuleConfigIfMatch, Detail: fmt.Sprintf("%s with If-Match %d committed version %d", o, o.IfVersion, o.Version), At: o.Start, Node: o.Node})
		}
		if len(h.Final) == 0 {
			continue
		}
		oldest := committed - uint64(len(final)) // versions at or below it are no longer kept
		switch summary, ok := kept[o.Version]; {
		case o.Version == 0 || o.Version > committed:
			out = append(out, Violation{Rule: RuleConfigLost, Detail: fmt.Sprintf("%s: version %d, and %d is the last committed", o, o.Version, committed), At: o.Start, Node: o.Node})
		case !ok && o.Version > oldest:
			out = append(out, Violation{Rule: RuleConfigLost, Detail: fmt.Sprintf("%s: version %d missing from the history", o, o.Version), At: o.Start, Node: o.Node})
		case ok && summary != o.Result:
			out = append(out, Violation{Rule: RuleConfigLost, Detail: fmt.Sprintf("%s: version %d is %q at the end", o, o.Version, summary), At: o.Start, Node: o.Node})
		}
	}
	return out
}

// CheckModel runs every check of the model on a history.
func CheckModel(h *History, vizDir string) (vs []Violation, undecided []string) {
	vs, undecided = checkLinearizable(h, vizDir)
	vs = append(vs, checkSessions(h)...)
	vs = append(vs, checkLiveness(h)...)
	vs = append(vs, checkRevocation(h)...)
	vs = append(vs, checkDrainDataPath(h)...)
	vs = append(vs, checkConfig(h)...)
	av, _, _ := checkAvailability(h)
	return append(vs, av...), undecided
}
