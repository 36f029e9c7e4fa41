package cluster

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"
)

// RaftServer is one server of the Raft configuration.
type RaftServer struct {
	ID, Address string
	Voter       bool
}

// Raft is what reconciliation needs from the store (store/ implements it;
// cluster/ never imports store/).
type Raft interface {
	IsLeader() bool
	// Term is the current Raft term: a new term is a new election, from
	// which the leader counts voters' failures afresh.
	Term() uint64
	Servers() ([]RaftServer, error)
	AddVoter(id, addr string) error
	AddNonvoter(id, addr string) error
	DemoteVoter(id string) error
	RemoveServer(id string) error
}

// Policy tunes reconciliation. Zero fields take the defaults noted.
type Policy struct {
	MaxVoters     int           // --raft-voters: at most this many voters; default 5, odd
	Expect        int           // --bootstrap-expect: voters are never removed below it
	ReapTimeout   time.Duration // --reap-timeout: failed this long -> removed; default 72h
	MaxLag        uint64        // a non-voter is caught up when its Durable >= leader's - MaxLag
	Stabilization time.Duration // a member must be alive this long before promotion
	// VoterGrace (--voter-grace): a voter is replaced, or demoted for an
	// even count, only once it has been failed this long, counted from the
	// later of its failure and LeaderSince; default 15s. Suspicion and
	// failure detection take seconds, so shorter blips change nothing.
	VoterGrace time.Duration
	// LeaderSince is when this leader was elected (Autopilot fills it in);
	// zero counts failures from the failure alone. A fresh leader has not
	// re-learnt every member through gossip yet.
	LeaderSince time.Time
}

// Policy defaults.
const (
	DefaultMaxVoters   = 5
	DefaultReapTimeout = 72 * time.Hour
	DefaultVoterGrace  = 15 * time.Second
)

// Validate checks a Policy given on the command line.
func (p Policy) Validate() error {
	switch {
	case p.MaxVoters < 0 || (p.MaxVoters > 0 && p.MaxVoters%2 == 0):
		return fmt.Errorf("cluster: raft-voters %d: want an odd number ≥ 1", p.MaxVoters)
	case p.Expect < 0:
		return fmt.Errorf("cluster: bootstrap-expect %d is negative", p.Expect)
	case p.ReapTimeout < 0:
		return fmt.Errorf("cluster: reap-timeout %s is negative", p.ReapTimeout)
	case p.VoterGrace < 0:
		return fmt.Errorf("cluster: voter-grace %s is negative", p.VoterGrace)
	case p.Stabilization < 0:
		return fmt.Errorf("cluster: stabilization %s is negative", p.Stabilization)
	case p.Expect > cmp.Or(p.MaxVoters, DefaultMaxVoters):
		return fmt.Errorf("cluster: bootstrap-expect %d is more than raft-voters %d: the cluster would demote voters it was formed with", p.Expect, cmp.Or(p.MaxVoters, DefaultMaxVoters))
	}
	return nil
}

func (p Policy) withDefaults() Policy {
	if p.MaxVoters <= 0 {
		p.MaxVoters = DefaultMaxVoters
	}
	p.MaxVoters = max(p.MaxVoters, p.Expect) // Validate refuses less; never demote below the formed size
	if p.ReapTimeout <= 0 {
		p.ReapTimeout = DefaultReapTimeout
	}
	if p.VoterGrace <= 0 {
		p.VoterGrace = DefaultVoterGrace
	}
	return p
}

// ActionKind is what one reconciliation step does.
type ActionKind int

// Action kinds, in the order Reconcile applies them within a plan.
const (
	AddNonvoter ActionKind = iota // Raft AddNonvoter(ID, Address)
	Promote                       // Raft AddVoter(ID, Address)
	Demote                        // Raft DemoteVoter(ID)
	Remove                        // Raft RemoveServer(ID)
)

func (k ActionKind) String() string {
	switch k {
	case AddNonvoter:
		return "add-nonvoter"
	case Promote:
		return "promote"
	case Demote:
		return "demote"
	case Remove:
		return "remove"
	}
	return fmt.Sprintf("action(%d)", int(k))
}

// Action is one step of a plan.
type Action struct {
	Kind                ActionKind
	ID, Address, Reason string
}

func (a Action) String() string {
	return fmt.Sprintf("%s %s %s (%s)", a.Kind, a.ID, a.Address, a.Reason)
}

// health of one Raft server as the planner sees it.
type health int

const (
	healthy health = iota // alive, stable, caught up (or self)
	live                  // alive but new or behind
	suspect               // memberlist suspects it
	failed                // dead, or unknown to gossip
	left                  // left gracefully
)

type planned struct {
	RaftServer
	m      Member
	h      health
	since  time.Time // failed since
	reason string
}

// Plan returns the steps that bring the Raft configuration in line with
// gossip membership, in the order to apply them. It is pure. self is the
// leader's id. See DESIGN.md for the rules; in short:
//   - an alive member not in the configuration is added as a non-voter,
//     unless it holds another cluster's id; a changed address is updated;
//   - a member claiming the address of a live server waits; of a failed
//     one, waits for that server's removal (a voter's after VoterGrace,
//     below Expect too: the claimant takes its place);
//   - a server that left is removed, one failed longer than ReapTimeout too;
//     non-voters without limit, voters at most ⌊(voters−1)/2⌋ per round and
//     never below Expect; never self;
//   - a voter failed for VoterGrace (counted from no earlier than
//     LeaderSince) is replaced by a healthy non-voter (promote, then demote);
//   - non-voters are promoted while voters < MaxVoters, keeping the count odd;
//   - extra voters are demoted, failed first, then the highest ids, never self.
//
// A Raft server that no member describes is failed since now: it can be
// replaced but is never reaped from one call alone; Autopilot remembers when
// it first saw such a server so that it is reaped after ReapTimeout.
func Plan(self string, servers []RaftServer, members []Member, leaderIndex uint64, p Policy, now time.Time) []Action {
	p = p.withDefaults()
	byID := make(map[string]Member, len(members))
	for _, m := range members {
		byID[m.ID] = m
	}
	inConfig := map[string]bool{}
	byAddr := map[string]string{}
	var ss []*planned
	for _, s := range servers {
		inConfig[s.ID] = true
		byAddr[s.Address] = s.ID
		ps := &planned{RaftServer: s}
		m, known := byID[s.ID]
		ps.m = m
		switch {
		case s.ID == self:
			ps.h = healthy
		case !known:
			ps.h, ps.since, ps.reason = failed, now, "unknown to gossip"
		case m.State == StateLeft:
			ps.h, ps.reason = left, "left the cluster"
		case m.State == StateDead:
			ps.h, ps.since, ps.reason = failed, m.Since, "failed"
		case m.State == StateSuspect:
			ps.h = suspect
		case now.Sub(m.Since) >= p.Stabilization && m.Durable+p.MaxLag >= leaderIndex:
			ps.h = healthy
		default:
			ps.h = live
		}
		ss = append(ss, ps)
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].ID < ss[j].ID })
	// graceOver: a failed voter may lose its vote. A left one at once; a
	// failed one after VoterGrace from the later of its failure and the
	// election (a blip, or a member not yet re-learnt, changes nothing).
	graceOver := func(ps *planned) bool {
		switch ps.h {
		case left:
			return true
		case failed:
			from := ps.since
			if p.LeaderSince.After(from) {
				from = p.LeaderSince
			}
			return now.Sub(from) >= p.VoterGrace
		}
		return false
	}

	var out []Action
	removed := map[string]bool{}
	remove := func(ps *planned, why string) {
		removed[ps.ID] = true
		out = append(out, Action{Kind: Remove, ID: ps.ID, Address: ps.Address, Reason: why})
	}

	// Adds and moves. A member whose Raft address another server still
	// holds waits for it: while the holder is live (a conflict /v1/members
	// shows: the store would refuse it and the failed step would stop the
	// rest of the round), and while it is failed until it is removed below
	// (Raft refuses two servers at one address).
	var adds []Action
	var stale []*planned   // failed holders of an address a member claims
	var claims []addrClaim // adds and moves that wait for their holder's removal
	ownCID := byID[self].ClusterID
	for _, m := range sortedMembers(members) {
		if m.ID == self || m.State != StateAlive || m.RaftAddr == "" {
			continue
		}
		if m.ClusterID != "" && ownCID != "" && m.ClusterID != ownCID {
			continue // another cluster's node (gossip refuses them; a bridge may show them)
		}
		a := Action{Kind: AddNonvoter, ID: m.ID, Address: m.RaftAddr, Reason: "joined gossip"}
		mover := find(ss, m.ID)
		if mover != nil {
			if mover.Address == m.RaftAddr {
				continue
			}
			if mover.Voter {
				a.Kind = Promote // AddVoter on a voter updates its address
			}
			a.Reason = fmt.Sprintf("raft address changed from %s", mover.Address)
		}
		if owner, ok := byAddr[m.RaftAddr]; ok && owner != m.ID {
			holder := find(ss, owner)
			if holder == nil || holder.h < failed || owner == self {
				continue // a live server holds the address: wait
			}
			if !slices.Contains(stale, holder) {
				stale = append(stale, holder)
			}
			claims = append(claims, addrClaim{a: a, holder: holder, mover: mover})
			continue
		}
		adds = append(adds, a)
	}

	// Removals: non-voters first and without limit (quorum does not count
	// them), then voters within the quorum budget and above Expect.
	voters := 0
	for _, ps := range ss {
		if ps.Voter {
			voters++
		}
	}
	reapable := func(ps *planned) (bool, string) {
		switch {
		case ps.ID == self:
			return false, ""
		case ps.h == left:
			return true, ps.reason
		case ps.h == failed && now.Sub(ps.since) >= p.ReapTimeout:
			return true, fmt.Sprintf("%s for %s (reap timeout %s)", ps.reason, now.Sub(ps.since).Round(time.Second), p.ReapTimeout)
		}
		for _, st := range stale {
			if st == ps {
				return true, "its raft address is taken by a new member"
			}
		}
		return false, ""
	}
	var voterCands []*planned
	for _, ps := range ss {
		ok, why := reapable(ps)
		if !ok {
			continue
		}
		if !ps.Voter {
			remove(ps, why)
			continue
		}
		if !graceOver(ps) {
			continue
		}
		ps.reason = why
		voterCands = append(voterCands, ps)
	}
	// left first, then the longest failed, then by id
	sort.SliceStable(voterCands, func(i, j int) bool {
		a, b := voterCands[i], voterCands[j]
		if (a.h == left) != (b.h == left) {
			return a.h == left
		}
		return a.since.Before(b.since)
	})
	// A failed voter whose address a member claims goes even below Expect:
	// the claimant takes its place (added, then promoted as any healthy
	// non-voter), where otherwise the address would stay taken until the
	// reap timeout.
	budget := (voters - 1) / 2
	for _, ps := range voterCands {
		if budget == 0 {
			break
		}
		if voters-1 < p.Expect && !slices.Contains(stale, ps) {
			continue
		}
		remove(ps, ps.reason)
		budget--
		voters--
	}
	// The claims whose holder is gone by now, after the removals; the
	// first claimant takes the address, others wait (a conflict).
	taken := map[string]bool{}
	for _, c := range claims {
		if !removed[c.holder.ID] || taken[c.a.Address] {
			continue
		}
		adds = append(adds, c.a)
		taken[c.a.Address] = true
		if c.mover != nil {
			c.mover.Address = c.a.Address // later steps of this plan use the new address
		}
	}

	// What remains.
	var vs, nvs []*planned
	for _, ps := range ss {
		if removed[ps.ID] {
			continue
		}
		if ps.Voter {
			vs = append(vs, ps)
		} else {
			nvs = append(nvs, ps)
		}
	}
	var promotable []*planned
	for _, ps := range nvs {
		if ps.h == healthy {
			promotable = append(promotable, ps)
		}
	}
	sort.SliceStable(promotable, func(i, j int) bool { return promotable[i].m.Durable > promotable[j].m.Durable })

	var changes []Action
	demoted := map[string]bool{}
	// Replace failed voters (and left ones that could not be removed yet).
	var bad []*planned
	for _, ps := range vs {
		if ps.ID != self && ps.h >= failed && graceOver(ps) {
			bad = append(bad, ps)
		}
	}
	sort.SliceStable(bad, func(i, j int) bool { return bad[i].since.Before(bad[j].since) })
	for _, ps := range bad {
		if len(promotable) == 0 {
			break
		}
		np := promotable[0]
		promotable = promotable[1:]
		changes = append(changes,
			Action{Kind: Promote, ID: np.ID, Address: np.Address, Reason: fmt.Sprintf("replaces voter %s (%s)", ps.ID, ps.reason)},
			Action{Kind: Demote, ID: ps.ID, Address: ps.Address, Reason: fmt.Sprintf("%s, replaced by %s", ps.reason, np.ID)})
		demoted[ps.ID] = true
	}
	count := len(vs)
	// Fill up to MaxVoters, keeping the count odd.
	if count < p.MaxVoters && len(promotable) > 0 {
		target := min(p.MaxVoters, count+len(promotable))
		if target%2 == 0 {
			target--
		}
		for ; count < target; count++ {
			np := promotable[0]
			promotable = promotable[1:]
			changes = append(changes, Action{Kind: Promote, ID: np.ID, Address: np.Address,
				Reason: fmt.Sprintf("healthy and caught up, %d voters of %d", count, p.MaxVoters)})
		}
	}
	// Too many voters: demote failed, then suspect or new, then the highest
	// ids, never self. A failed voter in an even count is demoted too (not
	// below Expect): one voter less tolerates one more failure then.
	var extra []*planned
	for _, ps := range vs {
		if ps.ID != self && !demoted[ps.ID] {
			extra = append(extra, ps)
		}
	}
	sort.SliceStable(extra, func(i, j int) bool {
		a, b := extra[i], extra[j]
		if (a.h >= failed) != (b.h >= failed) {
			return a.h >= failed
		}
		if (a.h == healthy) != (b.h == healthy) {
			return b.h == healthy
		}
		return a.ID > b.ID
	})
	for _, ps := range extra {
		var why string
		switch {
		case count > p.MaxVoters:
			why = fmt.Sprintf("%d voters, at most %d", count, p.MaxVoters)
		case count%2 == 0 && count > 1 && ps.h >= failed && graceOver(ps) && count-1 >= p.Expect:
			why = fmt.Sprintf("%s, and %d voters: %d tolerate one more failure", ps.reason, count, count-1)
		default:
			continue
		}
		changes = append(changes, Action{Kind: Demote, ID: ps.ID, Address: ps.Address, Reason: why})
		count--
	}

	// Order: stale removals before the adds that reuse their addresses.
	var first, rest []Action
	for _, a := range out {
		isStale := false
		for _, st := range stale {
			if st.ID == a.ID {
				isStale = true
			}
		}
		if isStale {
			first = append(first, a)
		} else {
			rest = append(rest, a)
		}
	}
	plan := append(first, adds...)
	plan = append(plan, changes...)
	return append(plan, rest...)
}

// addrClaim is an add or a move onto the address of a failed server, which
// must be removed first.
type addrClaim struct {
	a      Action
	holder *planned
	mover  *planned // the claimant's server when it is in the configuration
}

func find(ss []*planned, id string) *planned {
	for _, ps := range ss {
		if ps.ID == id {
			return ps
		}
	}
	return nil
}

func sortedMembers(ms []Member) []Member {
	out := append([]Member(nil), ms...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Reconcile applies one Plan on the leader (nothing on a follower). It
// stops at the first failing step: the next round plans again from the new
// configuration. A Raft server unknown to gossip is never reaped by
// Reconcile alone (see Plan); use an Autopilot to reap those.
func Reconcile(r Raft, self string, members []Member, leaderIndex uint64, p Policy, now time.Time, log *slog.Logger) error {
	if !r.IsLeader() {
		return nil
	}
	servers, err := r.Servers()
	if err != nil {
		return fmt.Errorf("cluster: reconcile: raft configuration: %w", err)
	}
	return apply(r, Plan(self, servers, members, leaderIndex, p, now), log, nil)
}

func apply(r Raft, plan []Action, log *slog.Logger, onRemove func(string)) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, a := range plan {
		var err error
		switch a.Kind {
		case AddNonvoter:
			err = r.AddNonvoter(a.ID, a.Address)
		case Promote:
			err = r.AddVoter(a.ID, a.Address)
		case Demote:
			err = r.DemoteVoter(a.ID)
		case Remove:
			err = r.RemoveServer(a.ID)
		default:
			err = errors.New("unknown action")
		}
		if err != nil {
			log.Warn("reconcile: step failed", "action", a.Kind.String(), "id", a.ID, "addr", a.Address, "reason", a.Reason, "err", err)
			return fmt.Errorf("cluster: reconcile: %s %s: %w", a.Kind, a.ID, err)
		}
		log.Info("reconcile", "action", a.Kind.String(), "id", a.ID, "addr", a.Address, "reason", a.Reason)
		if a.Kind == Remove && onRemove != nil {
			onRemove(a.ID)
		}
	}
	return nil
}

// Autopilot is Reconcile with memory: it remembers when it first saw each
// Raft server that gossip does not describe (a leader restarted after the
// node died knows nothing of it), and hands Plan such a server as dead since
// then, so it is reaped after ReapTimeout like any failed server. It also
// notes when it first reconciled in the current term and hands Plan that as
// LeaderSince, so a fresh leader replaces no voter within VoterGrace of its
// election.
type Autopilot struct {
	// OnRemove, when set, is called after each server the plan removed.
	OnRemove func(id string)

	mu    sync.Mutex
	first map[string]time.Time
	// term and elected: the term of the last round, and the first round's
	// time in it (no earlier than the election).
	term    uint64
	elected time.Time
}

// Reconcile is the package's Reconcile plus the unknown-server memory.
func (a *Autopilot) Reconcile(r Raft, self string, members []Member, leaderIndex uint64, p Policy, now time.Time, log *slog.Logger) error {
	if !r.IsLeader() {
		return nil
	}
	servers, err := r.Servers()
	if err != nil {
		return fmt.Errorf("cluster: reconcile: raft configuration: %w", err)
	}
	if since := a.leaderSince(r.Term(), now); since.After(p.LeaderSince) {
		p.LeaderSince = since
	}
	return apply(r, Plan(self, servers, a.Members(servers, members, now), leaderIndex, p, now), log, a.OnRemove)
}

// leaderSince returns when this Autopilot first reconciled in term.
func (a *Autopilot) leaderSince(term uint64, now time.Time) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.elected.IsZero() || term != a.term {
		a.term, a.elected = term, now
	}
	return a.elected
}

// Members returns members plus a dead Member for each server that none
// describes, dead since this Autopilot first saw it so.
func (a *Autopilot) Members(servers []RaftServer, members []Member, now time.Time) []Member {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.first == nil {
		a.first = map[string]time.Time{}
	}
	known := map[string]bool{}
	for _, m := range members {
		known[m.ID] = true
	}
	out := append([]Member(nil), members...)
	seen := map[string]bool{}
	for _, s := range servers {
		seen[s.ID] = true
		if known[s.ID] {
			delete(a.first, s.ID)
			continue
		}
		t, ok := a.first[s.ID]
		if !ok {
			t = now
			a.first[s.ID] = t
		}
		out = append(out, Member{Meta: Meta{ID: s.ID, RaftAddr: s.Address}, State: StateDead, Since: t})
	}
	for id := range a.first {
		if !seen[id] {
			delete(a.first, id)
		}
	}
	return out
}
