package chaos

import (
	"encoding/base64"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Op is one client operation: invoked at Start, completed at End as ok,
// fail (known not to have happened: a 4xx answer, a value that did not
// open) or info (unknown: a timeout, a 5xx, a lost connection).
type Op struct {
	Client int
	// Kind: rotate, revoke, drain, undrain, push (admin writes; push: of
	// the cluster's config, Arg names the route set); read (GET
	// /v1/keyring), dests (GET /v1/clusters/app/destinations); seal, open,
	// open-revoked (a value under a key whose revocation was acknowledged);
	// probe-active and probe-open (the liveness probe after the last fault).
	Kind       string
	Node       string
	Arg        string // revoke: the key id; drain, undrain: the destination; open: the sealing node/destination
	Type       string // ok, fail, info
	Start, End time.Time
	Result     string // rotate: the new key id; seal: the destination; push: the summary
	Cookie     string // seal: the sealed value
	Err        string
	// Status is the HTTP status of the answer (0: none).
	Status int `json:",omitempty"`
	// Names lists the key ids the answer named (rotate, revoke, keyring reads, sealed values).
	Names []string
	// Clean: the node was live and connected to a live leader throughout
	// (up and in the majority): an open must succeed, a read is fresh
	// within the read bound, an error counts against the availability budget.
	Clean bool
	// Keys (a keyring read): each key's state as the answer showed it.
	Keys map[string]string `json:",omitempty"`
	// Drains (a destinations read): each destination's draining flag.
	Drains map[string]bool `json:",omitempty"`
	// Index is the answer's X-Tether-Index (0: none); MinIndex the
	// X-Tether-Index the client sent with a read (the highest it had seen).
	Index    uint64 `json:",omitempty"`
	MinIndex uint64 `json:",omitempty"`
	// Epoch counts the node's process starts when the operation began: a
	// node's reads are monotonic only within one process.
	Epoch int `json:",omitempty"`
	// Version (a push of the cluster's config): the version the answer
	// named; IfVersion the If-Match it was sent with (0: none).
	Version   uint64 `json:",omitempty"`
	IfVersion uint64 `json:",omitempty"`
}

func (o Op) String() string {
	s := fmt.Sprintf("%s c%d %-7s %-4s %s", o.Start.Format("15:04:05.000"), o.Client, o.Kind, o.Type, o.Node)
	if o.Arg != "" {
		s += " " + o.Arg
	}
	if o.Result != "" {
		s += " -> " + o.Result
	}
	if o.Err != "" {
		s += " (" + o.Err + ")"
	}
	if o.Kind == "open" && o.Clean {
		s += " [clean]"
	}
	return s + fmt.Sprintf(" %dms", o.End.Sub(o.Start).Milliseconds())
}

// Sample is one poll of a node's /v1/status.
type Sample struct {
	At     time.Time
	Node   string
	Term   uint64
	State  string
	Leader string
	// ConfigVersion is the cluster config version the node applied (0: its
	// own file's); Epoch its process start count.
	ConfigVersion uint64 `json:",omitempty"`
	Epoch         int    `json:",omitempty"`
}

// VoterSample is the voter set as the node that claimed to lead saw it,
// with which nodes were live then (ground truth).
type VoterSample struct {
	At     time.Time
	From   string
	Voters []string
	Live   map[string]bool
}

// Fault is one nemesis action.
type Fault struct {
	Kind       string
	Nodes      []string
	Start, End time.Time
	Note       string
}

// Final is a node's state at the end: key states by id, drains by destination.
type Final struct {
	Keys   map[string]string
	Drains map[string]bool
	// Times: each key's created, activates and expires times (the
	// schedule of automatic rotation follows them).
	Times map[string]KeyTimes `json:",omitempty"`
	// ConfigVersion is the config version the node applied; Configs the
	// versions its GET /v1/config/history lists, newest first.
	ConfigVersion uint64        `json:",omitempty"`
	Configs       []ConfigEntry `json:",omitempty"`
}

// ConfigEntry is one version of the cluster's config as a history lists it.
type ConfigEntry struct {
	Version uint64
	Summary string
}

// KeyTimes are a key's committed times as GET /v1/keyring shows them.
type KeyTimes struct {
	Created, Activates, Expires time.Time
}

// History is everything the checker reads. It is written as JSON beside
// the nodes' logs (history.json); testdata/ holds histories the checker
// must reject.
type History struct {
	mu     sync.Mutex
	Ops    []Op
	Status []Sample
	Voters []VoterSample
	Faults []Fault
	Final  map[string]Final
	// Begin is when the clients started; Healed when the last fault was
	// healed and the cluster settled (zero: no liveness probe ran).
	Begin, Healed time.Time
	// IndexedReads: the build answers every read with the X-Tether-Index
	// it reflects and waits for the one a read sends; an answered read
	// without one is then a violation.
	IndexedReads bool `json:",omitempty"`
}

func (h *History) op(o Op) {
	h.mu.Lock()
	h.Ops = append(h.Ops, o)
	h.mu.Unlock()
}

func (h *History) fault(f Fault) {
	h.mu.Lock()
	h.Faults = append(h.Faults, f)
	h.mu.Unlock()
}

// seals returns the successful seals so far.
func (h *History) seals() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Op
	for _, o := range h.Ops {
		if o.Kind == "seal" && o.Type == "ok" {
			out = append(out, o)
		}
	}
	return out
}

// revoked returns the key ids a revocation was sent for.
func (h *History) revoked() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]bool{}
	for _, o := range h.Ops {
		if o.Kind == "revoke" {
			out[o.Arg] = true
		}
	}
	return out
}

// revokedAcked returns the key ids whose revocation was acknowledged.
func (h *History) revokedAcked() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]bool{}
	for _, o := range h.Ops {
		if o.Kind == "revoke" && o.Type == "ok" {
			out[o.Arg] = true
		}
	}
	return out
}

// keyIDOf reads the key id a sealed value carries (keyring/seal.go: version,
// id length, id, nonce, ciphertext and tag, base64url without padding).
func keyIDOf(value string) string {
	raw, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(raw) < 3 || int(raw[1])+2 > len(raw) {
		return ""
	}
	return string(raw[2 : 2+int(raw[1])])
}

// Violation is one broken rule, with the history that shows it.
type Violation struct {
	Rule   string
	Detail string
	// At and Node place it, for the report's excerpt of the faults before it.
	At   time.Time
	Node string
}

func (v Violation) String() string { return v.Rule + ": " + v.Detail }

// Rules the checker enforces.
const (
	RuleLostWrite   = "acknowledged write missing at the end"
	RuleUnopenable  = "sealed value a live node connected to the leader cannot open"
	RuleUncommitted = "answer names something never committed"
	RuleTwoLeaders  = "two leaders in one term"
	RuleQuorumLost  = "voter set lost its quorum through the cluster's own actions"
)

// Check reads a history and returns every violation.
func Check(h *History) []Violation {
	var out []Violation
	add := func(rule, f string, a ...any) { out = append(out, Violation{Rule: rule, Detail: fmt.Sprintf(f, a...)}) }
	addAt := func(at time.Time, node, rule, f string, a ...any) {
		out = append(out, Violation{Rule: rule, Detail: fmt.Sprintf(f, a...), At: at, Node: node})
	}

	// Revocations tried, by key id, with the first invocation: a value
	// under such a key may rightly stop opening from then on.
	revokedFrom := map[string]time.Time{}
	for _, o := range h.Ops {
		if o.Kind == "revoke" {
			if t, ok := revokedFrom[o.Arg]; !ok || o.Start.Before(t) {
				revokedFrom[o.Arg] = o.Start
			}
		}
	}

	// 1. Acknowledged writes are on every node at the end.
	nodes := make([]string, 0, len(h.Final))
	for n := range h.Final {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for i, o := range h.Ops {
		if o.Type != "ok" {
			continue
		}
		switch o.Kind {
		case "rotate":
			for _, n := range nodes {
				if _, ok := h.Final[n].Keys[o.Result]; !ok {
					add(RuleLostWrite, "%s: key %s missing on %s", o, o.Result, n)
				}
			}
		case "revoke":
			for _, n := range nodes {
				if st := h.Final[n].Keys[o.Arg]; st != "revoked" {
					add(RuleLostWrite, "%s: key %s is %q on %s, not revoked", o, o.Arg, st, n)
				}
			}
		case "drain", "undrain":
			// Only the last write to a destination, when nothing else
			// touched it during or after it, fixes its final state.
			settled := true
			for j, p := range h.Ops {
				if (p.Kind == "drain" || p.Kind == "undrain") && p.Arg == o.Arg && j != i && p.Type != "fail" && p.End.After(o.Start) {
					settled = false
					break
				}
			}
			if !settled {
				continue
			}
			for _, n := range nodes {
				if got, ok := h.Final[n].Drains[o.Arg]; !ok || got != (o.Kind == "drain") {
					add(RuleLostWrite, "%s: %s draining=%v on %s at the end", o, o.Arg, got, n)
				}
			}
		}
	}

	// 2. A sealed value opens on every clean node unless its key was revoked.
	for _, o := range h.Ops {
		if o.Kind != "open" || o.Type != "fail" || !o.Clean {
			continue
		}
		kid := keyIDOf(o.Cookie)
		if t, ok := revokedFrom[kid]; ok && t.Before(o.End) {
			continue
		}
		addAt(o.Start, o.Node, RuleUnopenable, "%s: value under key %s", o, kid)
	}

	// 3. Every key id an answer named was committed: it is on some node at the end.
	known := map[string]bool{}
	for _, f := range h.Final {
		for id := range f.Keys {
			known[id] = true
		}
	}
	named := map[string]Op{}
	for _, o := range h.Ops {
		if o.Type != "ok" {
			continue
		}
		for _, id := range o.Names {
			if _, seen := named[id]; !seen && id != "" {
				named[id] = o
			}
		}
	}
	ids := make([]string, 0, len(named))
	for id := range named {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if len(h.Final) > 0 {
		for _, id := range ids {
			if !known[id] {
				add(RuleUncommitted, "%s named key %s, which no node holds at the end", named[id], id)
			}
		}
	}

	// 4. At most one leader per term.
	leaders := map[uint64]map[string]time.Time{}
	for _, s := range h.Status {
		if s.State != "Leader" {
			continue
		}
		if leaders[s.Term] == nil {
			leaders[s.Term] = map[string]time.Time{}
		}
		if _, ok := leaders[s.Term][s.Node]; !ok {
			leaders[s.Term][s.Node] = s.At
		}
	}
	terms := make([]uint64, 0, len(leaders))
	for t := range leaders {
		terms = append(terms, t)
	}
	sort.Slice(terms, func(i, j int) bool { return terms[i] < terms[j] })
	for _, t := range terms {
		if len(leaders[t]) > 1 {
			var who []string
			for n, at := range leaders[t] {
				who = append(who, fmt.Sprintf("%s (first seen %s)", n, at.Format("15:04:05.000")))
			}
			sort.Strings(who)
			var first time.Time
			for _, at := range leaders[t] {
				if first.IsZero() || at.Before(first) {
					first = at
				}
			}
			addAt(first, "", RuleTwoLeaders, "term %d: %s", t, strings.Join(who, ", "))
		}
	}

	// 5. A change of the voter set never turns a set with a live majority
	// into one without (judged with the liveness of the same instant).
	quorate := func(vs []string, live map[string]bool) bool {
		n := 0
		for _, v := range vs {
			if live[v] {
				n++
			}
		}
		return 2*n > len(vs)
	}
	for i := 1; i < len(h.Voters); i++ {
		a, b := h.Voters[i-1], h.Voters[i]
		if strings.Join(a.Voters, ",") == strings.Join(b.Voters, ",") {
			continue
		}
		if quorate(a.Voters, b.Live) && !quorate(b.Voters, b.Live) {
			addAt(b.At, "", RuleQuorumLost, "%s: voters %v -> %v (seen on %s) with live %v", b.At.Format("15:04:05.000"), a.Voters, b.Voters, b.From, liveList(b.Live))
		}
	}
	return out
}

func liveList(m map[string]bool) []string {
	var out []string
	for n, ok := range m {
		if ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
