package healthgossip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/tether-proxy/tether/cluster"
)

// Health gossips destination health verdicts over a Membership and
// computes the cluster view of each destination from them. See DESIGN.md.
//
// Every verdict is versioned per (prober, cluster, destination); a newer
// version replaces an older one whatever the arrival order. Verdicts spread
// as named broadcasts that every node relays once when they are new to it
// (memberlist does not relay user broadcasts by itself), full state goes in
// push/pull, and each delta and a periodic digest carry a checksum of the
// prober's own verdicts so a node missing one pulls them from the prober.

// Membership is what health gossip needs from gossip membership
// (*cluster.Membership implements it): the alive members, a handler for its
// own payload kind, and broadcasts and direct messages under that kind.
type Membership interface {
	// NodeID is this node's id.
	NodeID() string
	// Members returns every known member with its state.
	Members() []cluster.Member
	// Register plugs the handler of a payload kind (tag) into gossip.
	Register(tag byte, h cluster.Handler) error
	// Broadcast queues a named broadcast; a newer one with the same name
	// replaces a queued older one.
	Broadcast(tag byte, name string, msg []byte) error
	// Send sends msg to one member (TCP when reliable, else one UDP packet).
	Send(id string, tag byte, msg []byte, reliable bool) error
	// PollInterval is how often membership re-reads member states; health
	// gossip re-reads the alive set and checks claims as often.
	PollInterval() time.Duration
}

// Verdict is one node's (or the cluster's) opinion of a destination.
type Verdict int

// Verdicts. Unknown means no opinion (never probed, or no majority).
const (
	VerdictUnknown Verdict = iota
	VerdictHealthy
	VerdictUnhealthy
)

func (v Verdict) String() string {
	switch v {
	case VerdictUnknown:
		return "unknown"
	case VerdictHealthy:
		return "healthy"
	case VerdictUnhealthy:
		return "unhealthy"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// Options configures New.
type Options struct {
	Logger *slog.Logger
	// OnChange is called (from one goroutine, never from a memberlist
	// callback, never concurrently) when the cluster view of a destination
	// may have changed: a verdict about it arrived or was forgotten, or the
	// alive members changed (then it is called for every known destination).
	OnChange func(cluster, dest string)
	// OnLag is called (from the same goroutine as OnChange) with the time
	// from another prober's verdict (its clock, carried in the message) to
	// its arrival here, for every newer verdict received by gossip or pull
	// (not push/pull, whose verdicts may be old on purpose).
	OnLag func(d time.Duration)
	// Digest is how often a small digest of this node's versions is
	// gossiped so a lost packet heals within one probe interval (default
	// 1 s).
	Digest time.Duration
	Now    func() time.Time // tests
}

// DefaultDigest is Options.Digest's default.
const DefaultDigest = time.Second

// ProberVerdict is one prober's last verdict about a destination.
type ProberVerdict struct {
	Node    string
	Verdict Verdict
	Version uint64
	At      time.Time // the prober's clock when it reached the verdict
}

// Stats counts health gossip handed to and received from memberlist.
// A queued broadcast counts once although memberlist transmits it up to
// RetransmitMult × ⌈log10(N+1)⌉ times.
type Stats struct{ MsgsSent, MsgsRecv, BytesSent, BytesRecv uint64 }

// message kinds, the first byte after the handler's tag.
const (
	kindDelta  = 1 // one verdict, relayed by gossip
	kindDigest = 2 // a prober's checksum of its own verdicts, gossiped every Digest
	kindPull   = 3 // "send me your verdicts", direct UDP to a prober
	kindFull   = 4 // a prober's own verdicts, direct TCP to the node that pulled
)

// healthStateVersion opens this handler's push/pull state.
const healthStateVersion = 2

type hkey struct{ cluster, dest string }

type hentry struct {
	v   Verdict
	ver uint64
	at  int64 // unix nanoseconds, the prober's clock
}

// sum is a checksum of the verdicts held for one prober: their count and
// the XOR of their hashes, so it updates in O(1) per change.
type sum struct {
	count uint64
	xor   uint64
}

// claim is what a prober last said its own sum was, as of its version
// counter.
type claim struct {
	counter uint64
	s       sum
}

type proberState struct {
	held     sum    // what this node holds for the prober
	seen     uint64 // the highest version this node saw from it
	claim    claim  // the prober's latest claim
	hasClaim bool
	since    time.Time // when held and claim started to differ (zero: they agree)
	pulled   time.Time // the last pull request sent to it
}

// Health is one node's health gossip.
type Health struct {
	m    Membership
	tag  byte
	self string
	opts Options
	log  *slog.Logger
	now  func() time.Time

	mu      sync.Mutex
	dests   map[hkey]map[string]hentry
	probers map[string]*proberState
	counter uint64 // the last version this node issued
	alive   []string
	aliveS  string
	dirty   map[hkey]struct{}
	all     bool // every destination is dirty (the alive set changed)
	lags    []time.Duration
	serve   map[string]struct{} // nodes that asked for this node's verdicts
	reissue map[hkey]struct{}   // own verdicts seen with a newer version (a previous life)
	closed  bool

	// dropIn, when set (tests), drops incoming messages of a kind.
	dropIn    atomic.Pointer[func(kind byte) bool]
	dropState atomic.Bool // and push/pull state

	msgsSent, msgsRecv, bytesSent, bytesRecv atomic.Uint64
	pulls                                    atomic.Uint64 // pull requests sent (tests)

	wake     chan struct{}
	sends    chan func()
	stop     chan struct{}
	done     sync.WaitGroup
	stopOnce sync.Once
}

// New starts health gossip on m under tag (a tag no other handler
// uses) and registers its handler.
func New(m Membership, tag byte, opts Options) (*Health, error) {
	if m == nil {
		return nil, errors.New("healthgossip: New: no Membership")
	}
	if opts.Digest < 0 {
		return nil, fmt.Errorf("healthgossip: New: Digest %s is negative", opts.Digest)
	}
	if opts.Digest == 0 {
		opts.Digest = DefaultDigest
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	lg := opts.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	h := &Health{
		m:       m,
		tag:     tag,
		self:    m.NodeID(),
		opts:    opts,
		log:     lg.With("component", "health-gossip"),
		now:     opts.Now,
		dests:   map[hkey]map[string]hentry{},
		probers: map[string]*proberState{},
		dirty:   map[hkey]struct{}{},
		serve:   map[string]struct{}{},
		reissue: map[hkey]struct{}{},
		wake:    make(chan struct{}, 1),
		sends:   make(chan func(), 256),
		stop:    make(chan struct{}),
	}
	if err := m.Register(tag, cluster.Handler{Msg: h.onMsg, LocalState: h.localState, MergeState: h.mergeState}); err != nil {
		return nil, fmt.Errorf("healthgossip: New: %w", err)
	}
	h.refreshAlive()
	h.done.Add(2)
	go h.loop()
	go h.sender()
	return h, nil
}

// Close stops the goroutines; messages that still arrive are ignored.
func (h *Health) Close() {
	h.stopOnce.Do(func() {
		h.mu.Lock()
		h.closed = true
		h.mu.Unlock()
		close(h.stop)
		h.done.Wait()
	})
}

// Stats returns the gossip counters.
func (h *Health) Stats() Stats {
	return Stats{MsgsSent: h.msgsSent.Load(), MsgsRecv: h.msgsRecv.Load(),
		BytesSent: h.bytesSent.Load(), BytesRecv: h.bytesRecv.Load()}
}

// Report records this node's own probe verdict about a destination and
// gossips it when it changed. Calling it again with the same verdict costs
// nothing.
func (h *Health) Report(cluster, dest string, v Verdict) {
	if v < VerdictUnknown || v > VerdictUnhealthy {
		h.log.Error("health gossip: invalid verdict ignored", "cluster", cluster, "dest", dest, "verdict", int(v))
		return
	}
	h.mu.Lock()
	k := hkey{cluster, dest}
	if e, ok := h.dests[k][h.self]; ok && e.v == v {
		h.mu.Unlock()
		return
	}
	msg, name := h.issueLocked(k, v)
	h.mu.Unlock()
	h.signal()
	h.broadcast(name, msg)
}

// issueLocked stores a new version of this node's verdict about k and
// returns its delta.
func (h *Health) issueLocked(k hkey, v Verdict) ([]byte, string) {
	now := h.now()
	ver := max(h.counter+1, uint64(max(now.UnixNano(), 0)))
	h.counter = ver
	e := hentry{v: v, ver: ver, at: now.UnixNano()}
	h.putLocked(h.self, k, e)
	h.dirty[k] = struct{}{}
	ps := h.probers[h.self]
	return encodeDelta(h.self, k, e, ps.held), deltaName(h.self, k)
}

func deltaName(prober string, k hkey) string {
	return "v" + prober + "\x00" + k.cluster + "\x00" + k.dest
}

func (h *Health) broadcast(name string, msg []byte) {
	if err := h.m.Broadcast(h.tag, name, msg); err != nil {
		h.log.Error("health gossip: verdict not gossiped", "err", err)
		return
	}
	h.msgsSent.Add(1)
	h.bytesSent.Add(uint64(len(msg)))
}

// Forget drops every verdict about a destination (it is gone after a
// reload). Peers that still hold this node's verdict about it drop it too
// once they see this node's digest.
func (h *Health) Forget(cluster, dest string) {
	k := hkey{cluster, dest}
	h.mu.Lock()
	for p, e := range h.dests[k] {
		h.dropLocked(p, k, e)
	}
	delete(h.dests, k)
	delete(h.dirty, k)
	delete(h.reissue, k)
	h.mu.Unlock()
}

// Verdicts lists every verdict held about a destination, by node id
// (including nodes that are no longer its probers).
func (h *Health) Verdicts(cluster, dest string) []ProberVerdict {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []ProberVerdict
	for p, e := range h.dests[hkey{cluster, dest}] {
		out = append(out, ProberVerdict{Node: p, Verdict: e.v, Version: e.ver, At: time.Unix(0, e.at)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// Probers returns the nodes that probe a destination: the fanout alive
// members (suspect ones included, as memberlist counts them) with the
// highest rendezvous score for it, best first. fanout < 1 counts as 1.
func (h *Health) Probers(cluster, dest string, fanout int) []string {
	h.mu.Lock()
	alive := h.alive
	h.mu.Unlock()
	return rendezvous(alive, cluster, dest, fanout)
}

// ShouldProbe reports whether this node is one of a destination's probers.
func (h *Health) ShouldProbe(cluster, dest string, fanout int) bool {
	return slices.Contains(h.Probers(cluster, dest, fanout), h.self)
}

// View is the cluster-wide verdict: unhealthy when a majority of the
// current probers (Probers(cluster, dest, fanout)) say so, healthy when a
// majority says healthy, unknown otherwise (no prober has spoken, or no
// majority: Effective then goes by this node's own verdict). Verdicts of
// nodes that are no longer probers are ignored.
func (h *Health) View(cluster, dest string, fanout int) Verdict {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, _, _ := h.viewLocked(cluster, dest, fanout)
	return v
}

// Effective is the verdict this node acts on: the cluster view when its
// probers have a majority, else this node's own verdict when it is one of
// the current probers (it probed the destination itself, recently), else
// unknown. Without a majority the nodes' views may differ; they agree
// again once a majority forms.
func (h *Health) Effective(cluster, dest string, fanout int) Verdict {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, probers, by := h.viewLocked(cluster, dest, fanout)
	if v == VerdictUnknown && slices.Contains(probers, h.self) {
		return by[h.self].v
	}
	return v
}

// viewLocked is View's majority, with the probers and the verdicts held.
func (h *Health) viewLocked(cluster, dest string, fanout int) (Verdict, []string, map[string]hentry) {
	probers := rendezvous(h.alive, cluster, dest, fanout)
	by := h.dests[hkey{cluster, dest}]
	vs := make([]Verdict, len(probers))
	for i, p := range probers {
		vs[i] = by[p].v
	}
	return majority(vs), probers, by
}

// majority is the cluster verdict from the current probers' verdicts (one
// per prober; unknown for a prober that has not spoken).
func majority(vs []Verdict) Verdict {
	var healthy, unhealthy int
	for _, v := range vs {
		switch v {
		case VerdictHealthy:
			healthy++
		case VerdictUnhealthy:
			unhealthy++
		}
	}
	switch {
	case 2*unhealthy > len(vs):
		return VerdictUnhealthy
	case 2*healthy > len(vs):
		return VerdictHealthy
	}
	return VerdictUnknown
}

// rendezvous ranks alive (sorted ids) by their score for the destination
// and returns the best fanout. Every node computes the same list from the
// same alive set; a node joining or leaving moves only the destinations
// it ranks for.
func rendezvous(alive []string, cluster, dest string, fanout int) []string {
	fanout = max(fanout, 1)
	if len(alive) == 0 {
		return nil
	}
	type scored struct {
		id    string
		score uint64
	}
	buf := make([]byte, 0, 64)
	all := make([]scored, len(alive))
	for i, id := range alive {
		buf = append(buf[:0], cluster...)
		buf = append(buf, 0)
		buf = append(buf, dest...)
		buf = append(buf, 0)
		buf = append(buf, id...)
		all[i] = scored{id, xxhash.Sum64(buf)}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].score != all[j].score {
			return all[i].score > all[j].score
		}
		return all[i].id < all[j].id
	})
	n := min(fanout, len(all))
	out := make([]string, n)
	for i := range n {
		out[i] = all[i].id
	}
	return out
}

// entryHash is one verdict's contribution to its prober's sum.
func entryHash(k hkey, e hentry) uint64 {
	d := xxhash.New()
	_, _ = d.WriteString(k.cluster)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(k.dest)
	var b [10]byte
	b[0] = 0
	b[1] = byte(e.v)
	binary.LittleEndian.PutUint64(b[2:], e.ver)
	_, _ = d.Write(b[:])
	return d.Sum64()
}

func (h *Health) prober(p string) *proberState {
	ps, ok := h.probers[p]
	if !ok {
		ps = &proberState{}
		h.probers[p] = ps
	}
	return ps
}

// putLocked stores e as p's verdict about k (the caller checked it is newer).
func (h *Health) putLocked(p string, k hkey, e hentry) {
	by := h.dests[k]
	if by == nil {
		by = map[string]hentry{}
		h.dests[k] = by
	}
	ps := h.prober(p)
	if old, ok := by[p]; ok {
		ps.held.count--
		ps.held.xor ^= entryHash(k, old)
	}
	by[p] = e
	ps.held.count++
	ps.held.xor ^= entryHash(k, e)
	ps.seen = max(ps.seen, e.ver)
}

func (h *Health) dropLocked(p string, k hkey, e hentry) {
	ps := h.prober(p)
	ps.held.count--
	ps.held.xor ^= entryHash(k, e)
	delete(h.dests[k], p)
	if len(h.dests[k]) == 0 {
		delete(h.dests, k)
	}
}

// mergeLocked applies a verdict from gossip and reports whether it was
// newer than the one held.
func (h *Health) mergeLocked(p string, k hkey, e hentry) bool {
	old, ok := h.dests[k][p]
	if ok && old.ver >= e.ver {
		return false
	}
	if p == h.self {
		// our own verdict from a previous life (a restart with a clock
		// behind): issue ours again above it, or keep it when we have none.
		h.counter = max(h.counter, e.ver)
		if ok {
			h.reissue[k] = struct{}{}
			return false
		}
	}
	h.putLocked(p, k, e)
	h.dirty[k] = struct{}{}
	return true
}

// claimLocked records a prober's claim about its own sum when it is not
// older than the one held.
func (h *Health) claimLocked(p string, c claim) {
	if p == h.self {
		return
	}
	ps := h.prober(p)
	if ps.hasClaim && c.counter < ps.claim.counter {
		return
	}
	ps.claim, ps.hasClaim = c, true
}

// onMsg is the memberlist handler for messages: it never blocks.
func (h *Health) onMsg(b []byte) {
	h.msgsRecv.Add(1)
	h.bytesRecv.Add(uint64(len(b)))
	if len(b) == 0 {
		return
	}
	if drop := h.dropIn.Load(); drop != nil && (*drop)(b[0]) {
		return
	}
	m, err := decodeMsg(b)
	if err != nil {
		h.log.Debug("health gossip: message dropped", "err", err)
		return
	}
	now := h.now()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	relay := false
	switch m.kind {
	case kindDelta:
		if h.mergeLocked(m.prober, m.key, m.entry) {
			relay = m.prober != h.self
			h.lagLocked(now, m.entry)
		}
		h.claimLocked(m.prober, claim{m.entry.ver, m.sum})
	case kindDigest:
		h.claimLocked(m.prober, claim{m.counter, m.sum})
	case kindPull:
		h.serve[m.prober] = struct{}{}
	case kindFull:
		h.mergeFullLocked(now, m)
	}
	h.mu.Unlock()
	if relay {
		h.broadcast(deltaName(m.prober, m.key), b)
	}
	h.signal()
}

func (h *Health) lagLocked(now time.Time, e hentry) {
	if h.opts.OnLag != nil && len(h.lags) < 4096 {
		h.lags = append(h.lags, now.Sub(time.Unix(0, e.at)))
	}
}

// mergeFullLocked applies a prober's own verdicts: they are authoritative
// up to its counter, so verdicts of it held here and absent from the
// reply (it forgot them) are dropped.
func (h *Health) mergeFullLocked(now time.Time, m healthMsg) {
	if m.prober == h.self {
		return
	}
	in := map[hkey]bool{}
	var s sum
	for _, x := range m.entries {
		in[x.key] = true
		s.count++
		s.xor ^= entryHash(x.key, x.entry)
		if h.mergeLocked(m.prober, x.key, x.entry) {
			h.lagLocked(now, x.entry)
		}
	}
	for k, by := range h.dests {
		if e, ok := by[m.prober]; ok && !in[k] && e.ver <= m.counter {
			h.dropLocked(m.prober, k, e)
			h.dirty[k] = struct{}{}
		}
	}
	h.claimLocked(m.prober, claim{m.counter, s})
}

// localState is this handler's push/pull state: on a join every verdict
// held (the new node knows nothing), otherwise only this node's own. The
// periodic exchange is a backstop: a prober's own verdicts are what its
// digest covers, and verdicts of a node that is not alive do not count.
func (h *Health) localState(join bool) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := []byte{healthStateVersion}
	n := len(h.dests)
	if !join {
		n = int(h.prober(h.self).held.count)
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, by := range h.dests {
		if join {
			b = appendStr(b, k.cluster)
			b = appendStr(b, k.dest)
			b = binary.AppendUvarint(b, uint64(len(by)))
			for p, e := range by {
				b = appendStr(b, p)
				b = appendVerdict(b, e)
			}
		} else if e, ok := by[h.self]; ok {
			b = appendStr(b, k.cluster)
			b = appendStr(b, k.dest)
			b = append(b, 1)
			b = appendStr(b, h.self)
			b = appendVerdict(b, e)
		}
	}
	h.msgsSent.Add(1)
	h.bytesSent.Add(uint64(len(b)))
	return b
}

func (h *Health) mergeState(buf []byte, _ bool) {
	h.msgsRecv.Add(1)
	h.bytesRecv.Add(uint64(len(buf)))
	if h.dropState.Load() {
		return
	}
	st, err := decodeState(buf)
	if err != nil {
		h.log.Warn("health gossip: peer's push/pull state dropped", "err", err)
		return
	}
	h.mu.Lock()
	if !h.closed {
		for _, x := range st {
			h.mergeLocked(x.prober, x.key, x.entry)
		}
	}
	h.mu.Unlock()
	h.signal()
}

func (h *Health) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// refreshAlive re-reads the alive members and reports whether they changed.
func (h *Health) refreshAlive() bool {
	var alive []string
	for _, x := range h.m.Members() {
		if x.Alive() {
			alive = append(alive, x.ID)
		}
	}
	s := strings.Join(alive, "\x00")
	h.mu.Lock()
	defer h.mu.Unlock()
	if s == h.aliveS {
		return false
	}
	h.alive, h.aliveS = alive, s
	h.all = true
	return true
}

// loop is the one goroutine that calls OnChange and OnLag, follows the
// alive set, gossips the digest and decides which probers to pull from.
func (h *Health) loop() {
	defer h.done.Done()
	poll := time.NewTicker(h.m.PollInterval())
	defer poll.Stop()
	digest := time.NewTicker(h.opts.Digest)
	defer digest.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-h.wake:
		case <-poll.C:
			h.refreshAlive()
			h.checkClaims()
		case <-digest.C:
			h.sendDigest()
		}
		h.work()
	}
}

// work does what callbacks queued: serve pulls, re-issue verdicts, call
// OnLag and OnChange.
func (h *Health) work() {
	h.mu.Lock()
	var keys []hkey
	if h.all {
		keys = make([]hkey, 0, len(h.dests))
		for k := range h.dests {
			keys = append(keys, k)
		}
		h.all = false
	} else {
		for k := range h.dirty {
			keys = append(keys, k)
		}
	}
	clear(h.dirty)
	lags := h.lags
	h.lags = nil
	var serve []string
	var full []byte
	if len(h.serve) > 0 {
		for id := range h.serve {
			serve = append(serve, id)
		}
		clear(h.serve)
		full = h.encodeFullLocked()
	}
	type out struct {
		name string
		msg  []byte
	}
	var again []out
	for k := range h.reissue {
		if e, ok := h.dests[k][h.self]; ok {
			msg, name := h.issueLocked(k, e.v)
			again = append(again, out{name, msg})
			keys = append(keys, k)
		}
	}
	clear(h.reissue)
	h.mu.Unlock()

	for _, o := range again {
		h.broadcast(o.name, o.msg)
	}
	for _, id := range serve {
		h.send(id, full, true)
	}
	if h.opts.OnLag != nil {
		for _, d := range lags {
			h.opts.OnLag(d)
		}
	}
	if h.opts.OnChange != nil {
		sort.Slice(keys, func(i, j int) bool {
			if keys[i].cluster != keys[j].cluster {
				return keys[i].cluster < keys[j].cluster
			}
			return keys[i].dest < keys[j].dest
		})
		for _, k := range keys {
			h.opts.OnChange(k.cluster, k.dest)
		}
	}
}

// encodeFullLocked is this node's own verdicts, for a node that pulled.
func (h *Health) encodeFullLocked() []byte {
	b := []byte{kindFull}
	b = appendStr(b, h.self)
	b = binary.AppendUvarint(b, h.counter)
	n := h.prober(h.self).held.count
	b = binary.AppendUvarint(b, n)
	for k, by := range h.dests {
		if e, ok := by[h.self]; ok {
			b = appendEntry(b, k, e)
		}
	}
	return b
}

// sendDigest gossips this node's counter and sum. It is not relayed: a
// verdict's delta already carries the sum as of that verdict, and the
// digest only covers a delta lost everywhere it went.
func (h *Health) sendDigest() {
	h.mu.Lock()
	ps := h.prober(h.self)
	b := []byte{kindDigest}
	b = appendStr(b, h.self)
	b = binary.AppendUvarint(b, h.counter)
	b = appendSum(b, ps.held)
	h.mu.Unlock()
	h.broadcast("d", b)
}

// maxPullsPerTick bounds the pulls one check starts: after a mass change
// many probers' sums differ for a while, and deltas still on their way fix
// most of them.
const maxPullsPerTick = 4

// checkClaims pulls from a prober whose claimed sum has differed from what
// this node holds for a whole Digest interval (deltas arrive out of order
// and late under load), at most once per Digest interval per prober and
// maxPullsPerTick per check.
func (h *Health) checkClaims() {
	now := h.now()
	grace := h.opts.Digest
	var pull []string
	h.mu.Lock()
	for p, ps := range h.probers {
		if p == h.self || !ps.hasClaim {
			continue
		}
		if ps.held == ps.claim.s || ps.seen > ps.claim.counter {
			ps.since = time.Time{} // agree, or ahead of the claim: a newer one will come
			continue
		}
		if ps.since.IsZero() {
			ps.since = now
			continue
		}
		if len(pull) < maxPullsPerTick && now.Sub(ps.since) >= grace && now.Sub(ps.pulled) >= h.opts.Digest && slices.Contains(h.alive, p) {
			ps.pulled = now
			pull = append(pull, p)
		}
	}
	h.mu.Unlock()
	req := appendStr([]byte{kindPull}, h.self)
	for _, p := range pull {
		h.log.Debug("health gossip: pulling verdicts", "prober", p)
		h.pulls.Add(1)
		h.send(p, req, false)
	}
}

// send queues a direct message for the sender goroutine (a TCP send may
// take a while); when the queue is full it is dropped: the digest retries.
func (h *Health) send(id string, msg []byte, reliable bool) {
	f := func() {
		if err := h.m.Send(id, h.tag, msg, reliable); err != nil {
			h.log.Debug("health gossip: send failed", "to", id, "err", err)
			return
		}
		h.msgsSent.Add(1)
		h.bytesSent.Add(uint64(len(msg)))
	}
	select {
	case h.sends <- f:
	default:
	}
}

func (h *Health) sender() {
	defer h.done.Done()
	for {
		select {
		case <-h.stop:
			return
		case f := <-h.sends:
			f()
		}
	}
}

// ---- encoding ----
//
// Strings are a uvarint length and bytes; versions and counts uvarints;
// times varint unix nanoseconds; a sum is a uvarint count and 8 bytes.
//
//	delta:  1 | version | verdict | at | prober | cluster | dest | prober's sum
//	digest: 2 | prober | counter | sum
//	pull:   3 | requester
//	full:   4 | prober | counter | n | n × (cluster | dest | verdict | version | version−at)
//	state:  version 2 | n | n × (cluster | dest | m | m × (prober | verdict | version | version−at))

type healthEntry struct {
	prober string
	key    hkey
	entry  hentry
}

type healthMsg struct {
	kind    byte
	prober  string // the prober, or the requester of a pull
	key     hkey
	entry   hentry
	counter uint64
	sum     sum
	entries []healthEntry
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendSum(b []byte, s sum) []byte {
	b = binary.AppendUvarint(b, s.count)
	return binary.LittleEndian.AppendUint64(b, s.xor)
}

func appendEntry(b []byte, k hkey, e hentry) []byte {
	b = appendStr(b, k.cluster)
	b = appendStr(b, k.dest)
	return appendVerdict(b, e)
}

// appendVerdict writes the time as its distance to the version: a version
// is the time it was issued at unless versions came faster than the clock,
// so this is usually one byte instead of nine.
func appendVerdict(b []byte, e hentry) []byte {
	b = append(b, byte(e.v))
	b = binary.AppendUvarint(b, e.ver)
	return binary.AppendVarint(b, int64(e.ver)-e.at)
}

func encodeDelta(prober string, k hkey, e hentry, s sum) []byte {
	b := []byte{kindDelta}
	b = binary.AppendUvarint(b, e.ver)
	b = append(b, byte(e.v))
	b = binary.AppendVarint(b, e.at)
	b = appendStr(b, prober)
	b = appendStr(b, k.cluster)
	b = appendStr(b, k.dest)
	return appendSum(b, s)
}

type hreader struct {
	b   []byte
	err error
}

func (r *hreader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("health gossip: truncated or bad %s", what)
	}
}

func (r *hreader) uvarint(what string) uint64 { return readVarint(r, what, binary.Uvarint) }

func (r *hreader) varint(what string) int64 { return readVarint(r, what, binary.Varint) }

// readVarint reads one number with read (binary.Uvarint or binary.Varint);
// 0 once the reader has failed.
func readVarint[T uint64 | int64](r *hreader, what string, read func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	v, n := read(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *hreader) str(what string) string {
	n := r.uvarint(what)
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.fail(what)
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *hreader) verdict() Verdict {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 || r.b[0] > byte(VerdictUnhealthy) {
		r.fail("verdict")
		return 0
	}
	v := Verdict(r.b[0])
	r.b = r.b[1:]
	return v
}

func (r *hreader) sum() sum {
	c := r.uvarint("sum count")
	if r.err != nil {
		return sum{}
	}
	if len(r.b) < 8 {
		r.fail("sum")
		return sum{}
	}
	x := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return sum{c, x}
}

func (r *hreader) entry() (hkey, hentry) {
	var k hkey
	k.cluster = r.str("cluster")
	k.dest = r.str("destination")
	return k, r.verdictEntry()
}

func (r *hreader) verdictEntry() hentry {
	var e hentry
	e.v = r.verdict()
	e.ver = r.uvarint("version")
	e.at = int64(e.ver) - r.varint("time")
	return e
}

func (r *hreader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("health gossip: %d trailing bytes", len(r.b))
	}
	return r.err
}

// decodeMsg parses a peer's message (after the handler's tag). Peers hold
// the gossip key, yet a malformed message must never crash this node.
func decodeMsg(b []byte) (healthMsg, error) {
	if len(b) == 0 {
		return healthMsg{}, errors.New("health gossip: empty message")
	}
	m := healthMsg{kind: b[0]}
	r := &hreader{b: b[1:]}
	switch m.kind {
	case kindDelta:
		m.entry.ver = r.uvarint("version")
		m.entry.v = r.verdict()
		m.entry.at = r.varint("time")
		m.prober = r.str("prober")
		m.key.cluster = r.str("cluster")
		m.key.dest = r.str("destination")
		m.sum = r.sum()
	case kindDigest:
		m.prober = r.str("prober")
		m.counter = r.uvarint("counter")
		m.sum = r.sum()
	case kindPull:
		m.prober = r.str("requester")
	case kindFull:
		m.prober = r.str("prober")
		m.counter = r.uvarint("counter")
		n := r.uvarint("count")
		for i := uint64(0); i < n && r.err == nil; i++ {
			k, e := r.entry()
			m.entries = append(m.entries, healthEntry{m.prober, k, e})
		}
	default:
		return healthMsg{}, fmt.Errorf("health gossip: unknown message kind %d", m.kind)
	}
	if err := r.end(); err != nil {
		return healthMsg{}, err
	}
	if m.prober == "" {
		return healthMsg{}, errors.New("health gossip: message names no node")
	}
	return m, nil
}

// decodeState parses a peer's push/pull state.
func decodeState(b []byte) ([]healthEntry, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if b[0] != healthStateVersion {
		return nil, fmt.Errorf("health gossip: state version %d, want %d", b[0], healthStateVersion)
	}
	r := &hreader{b: b[1:]}
	n := r.uvarint("count")
	var out []healthEntry
	for i := uint64(0); i < n && r.err == nil; i++ {
		var k hkey
		k.cluster = r.str("cluster")
		k.dest = r.str("destination")
		np := r.uvarint("prober count")
		for j := uint64(0); j < np && r.err == nil; j++ {
			p := r.str("prober")
			e := r.verdictEntry()
			if r.err == nil && p == "" {
				return nil, errors.New("health gossip: state entry names no prober")
			}
			out = append(out, healthEntry{p, k, e})
		}
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return out, nil
}
