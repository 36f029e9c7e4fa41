package node

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/keyring"
)

// TLS session ticket seeds (keyring.TicketSeeds). The leader makes one
// random seed per UTC day of the cluster time, today's and tomorrow's, and
// every member asks it for them over gossip, so every node derives the
// same ticket keys from the keyring keys and the day's seed, while no Raft
// log, snapshot, backup or file holds a seed: a backup and the cluster
// secret give no ticket key. A node erases a seed once its day is seven
// days past.
//
// A request is authenticated with an HMAC under a key derived from the
// cluster secret and carries the asker's ephemeral X25519 public key. The
// answer is sealed (AES-256-GCM) under a key derived with HKDF from the
// X25519 shared secret of that key and one the answerer makes for this
// answer, salted with the same secret-derived key, and bound to the whole
// request and the answerer's public key: it opens only for the node that
// sent that request, and never with the cluster secret alone, so recorded
// gossip and a later theft of the secret reveal no seed. Both ephemeral
// private keys are dropped after the exchange.
//
// A new leader that lacks today's or tomorrow's seed first asks the
// members for theirs (a failover keeps the seeds), and makes the ones
// nobody holds (a whole-cluster restart makes new ones: earlier tickets no
// longer resume). The leader's answer is authoritative: a member that held
// another seed for a day (two leaders raced it) seals with the leader's
// and keeps its own to open the tickets sealed under it.
const (
	seedRequestTag = 's'
	seedAnswerTag  = 'S'
	// ticketSeedScheme is what a node gossips in cluster.Meta.Tickets.
	ticketSeedScheme = 1
	// seedVersion is the version of the request and answer.
	seedVersion = 1
	// seedRound is how often a node looks at its seeds: the leader makes
	// the day's and the next day's, a member asks the leader for them.
	seedRound = time.Second
	// seedRetry paces the rounds while this node lacks today's or
	// tomorrow's seed.
	seedRetry = 200 * time.Millisecond
	// seedWakeSpacing is the least time between rounds a wake brings.
	seedWakeSpacing = 100 * time.Millisecond
	// seedRefresh: a member asks the leader at least this often.
	seedRefresh = time.Minute
	// seedAskTimeout bounds one request: answers take milliseconds, and
	// one to a node that just restarted on a new gossip port is lost until
	// the answerer learns the port (the asker then asks again).
	seedAskTimeout = 500 * time.Millisecond
	// seedGatherWait bounds how long a new leader lacking today's or
	// tomorrow's seed waits for the members' before it makes new ones:
	// patient, as a seed made anew ends every ticket issued before.
	seedGatherWait = 2 * time.Second
	// keyringTicketsAfter is how long after this node last saw a member of
	// a release before seeds it still opens tickets sealed from the
	// keyring alone: their lifetime.
	keyringTicketsAfter = keyring.TicketKeyLifetime
	// seedNonceSize is the length of a request's nonce.
	seedNonceSize = 16
	// seedQueue bounds the requests waiting to be answered; more are
	// dropped (the asker times out and asks again).
	seedQueue = 16
)

// ticketSeeder keeps this node's seeds: it makes them while this node
// leads, asks the leader for them otherwise, and answers other nodes'
// requests.
type ticketSeeder struct {
	n      *Node
	crypto *seedCrypto // nil without gossip
	work   chan []byte // requests to answer, on one goroutine
	wake   chan struct{}
	// settled is the Raft term whose leader round this node ran (taking
	// the members' seeds or making new ones); 0 while not leading.
	settled atomic.Uint64

	mu      sync.Mutex
	waiting map[string]chan seedAnswerMsg // request nonce (hex) -> its asker

	// took is the last answer this node took from a leader; lastAsk and
	// lastPeerAsk (the loop's own) when it last asked the leader, and a
	// member for want of a leader.
	took                 atomic.Pointer[seedSource]
	lastAsk, lastPeerAsk time.Time

	requests *prometheus.CounterVec // result
	made     prometheus.Counter
}

// seedSource is an answer a member took from the leader.
type seedSource struct {
	leader   string
	term     uint64
	complete bool // authoritative: the leader's seeds were adopted
	at       time.Time
}

// openTicketSeeds sets up the seeds' exchange (with gossip) and metrics;
// the loop starts with the node's background work. newSeedCrypto takes
// every cluster secret the node accepts, the one in use first.
func (n *Node) openTicketSeeds(secret []byte) error {
	s := &ticketSeeder{
		n: n, work: make(chan []byte, seedQueue), wake: make(chan struct{}, 1), waiting: map[string]chan seedAnswerMsg{},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_tls_ticket_seed_requests_total",
			Help: "Requests for TLS session ticket seeds this node sent (to the leader, or to the members as a new leader), by result (ok, failed).",
		}, []string{"result"}),
		made: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_tls_ticket_seeds_made_total",
			Help: "TLS session ticket seeds this node made while leading (one a day; more after a whole-cluster restart).",
		}),
	}
	n.seeder = s
	if n.members == nil || n.legacyTickets {
		return nil
	}
	if n.secrets != nil {
		s.crypto = newSeedCryptoFrom(n.secrets)
	} else {
		c, err := newSeedCrypto(secret)
		if err != nil {
			return err
		}
		s.crypto = c
	}
	if err := n.members.Register(seedRequestTag, cluster.Handler{Msg: s.request}); err != nil {
		return err
	}
	return n.members.Register(seedAnswerTag, cluster.Handler{Msg: s.reply})
}

// wakeUp asks the loop for a round now (never blocks).
func (s *ticketSeeder) wakeUp() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// loop runs the rounds until ctx ends. A wake (a handshake found no key)
// brings the next round forward, to no less than seedWakeSpacing after
// the last: handshakes while tickets are off cost no more rounds.
func (s *ticketSeeder) loop(ctx context.Context) {
	defer s.n.bg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
			if since := time.Since(last); since < seedWakeSpacing {
				t.Reset(seedWakeSpacing - since)
				continue
			}
		}
		last = time.Now()
		t.Reset(s.round(ctx))
	}
}

// round is one look at the seeds; it returns when the next is due.
func (s *ticketSeeder) round(ctx context.Context) time.Duration {
	n := s.n
	now := time.Now()
	today := keyring.TicketDay(n.ticketTime(now))
	n.seeds.Prune(today)
	n.noteTicketScheme(now)
	if n.store.IsLeader() {
		term := n.store.Term()
		if s.settled.Load() != term {
			if s.lacks(today) {
				s.gather(ctx, today)
			}
			s.settled.Store(term)
		}
		for _, day := range []int64{today, today + 1} {
			if n.seeds.Generate(day) {
				s.made.Inc()
				n.log.Debug("made the TLS session ticket seed of a day", "day", keyring.TicketDayStart(day).Format(time.DateOnly))
			}
		}
		return seedRound
	}
	s.settled.Store(0)
	s.fetch(ctx, today, now)
	if s.lacks(today) {
		return seedRetry
	}
	return seedRound
}

func (s *ticketSeeder) lacks(today int64) bool {
	return !s.n.seeds.Has(today) || !s.n.seeds.Has(today+1)
}

// speaks reports whether member id is alive and exchanges seeds.
func (s *ticketSeeder) speaks(id string) bool {
	for _, m := range s.n.members.Members() {
		if m.ID == id {
			return m.Alive() && m.Tickets >= ticketSeedScheme
		}
	}
	return false
}

// fetch asks the leader for its seeds when this node has not taken a
// complete answer from this leader in this term, lacks today's or
// tomorrow's seed, or asked longer than seedRefresh ago.
func (s *ticketSeeder) fetch(ctx context.Context, today int64, now time.Time) {
	n := s.n
	if s.crypto == nil || n.seedFetchOff.Load() {
		return
	}
	leader, _ := n.store.Leader()
	if leader == n.cfg.NodeID {
		return
	}
	if leader == "" || !s.speaks(leader) {
		s.fetchFromPeer(ctx, today, now)
		return
	}
	term := n.store.Term()
	last := s.took.Load()
	stale := last == nil || last.leader != leader || last.term != term || !last.complete || s.lacks(today) || now.Sub(last.at) >= seedRefresh
	if !stale || now.Sub(s.lastAsk) < seedRetry {
		return
	}
	s.lastAsk = now
	ans, err := s.ask(ctx, leader, seedAskTimeout)
	if err != nil {
		s.requests.WithLabelValues("failed").Inc()
		n.log.Debug("asking the leader for the TLS session ticket seeds failed", "leader", leader, "error", err)
		return
	}
	s.requests.WithLabelValues("ok").Inc()
	days := ans.Days
	defer clearDays(days)
	took := &seedSource{leader: leader, term: term, at: now}
	if ans.Leader && ans.Complete && ans.Term == term {
		n.seeds.Adopt(days)
		took.complete = true
	} else {
		n.seeds.Fill(days)
	}
	s.took.Store(took)
	n.seeds.Prune(today)
}

// fetchFromPeer: with no leader to ask (a restarted node before it hears
// from one), a member's seeds let this node seal tickets the others open
// until the leader's answer comes. At most one request a round (lost
// quorum may last).
func (s *ticketSeeder) fetchFromPeer(ctx context.Context, today int64, now time.Time) {
	n := s.n
	if !s.lacks(today) || now.Sub(s.lastPeerAsk) < seedRound {
		return
	}
	var peers []string
	for _, m := range n.members.Members() {
		if m.ID != n.cfg.NodeID && m.Alive() && m.Tickets >= ticketSeedScheme {
			peers = append(peers, m.ID)
		}
	}
	if len(peers) == 0 {
		return
	}
	s.lastPeerAsk = now
	peer := peers[mrand.IntN(len(peers))]
	ans, err := s.ask(ctx, peer, seedAskTimeout)
	if err != nil {
		s.requests.WithLabelValues("failed").Inc()
		n.log.Debug("asking a member for the TLS session ticket seeds failed", "member", peer, "error", err)
		return
	}
	s.requests.WithLabelValues("ok").Inc()
	n.seeds.Fill(ans.Days)
	clearDays(ans.Days)
	n.seeds.Prune(today)
}

// gather runs when this node became leader lacking today's or tomorrow's
// seed: it asks every alive member that exchanges seeds for theirs (for at
// most seedGatherWait) and takes, for each day it lacks, the seed most of
// them seal with (ties: the least), with the others they hold to open.
func (s *ticketSeeder) gather(ctx context.Context, today int64) {
	n := s.n
	if s.crypto == nil {
		return
	}
	var peers []string
	for _, m := range n.members.Members() {
		if m.ID != n.cfg.NodeID && m.Alive() && m.Tickets >= ticketSeedScheme {
			peers = append(peers, m.ID)
		}
	}
	if len(peers) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, seedGatherWait)
	defer cancel()
	answers := make(chan []keyring.DaySeeds, len(peers))
	for _, p := range peers {
		go func() {
			ans, err := s.ask(ctx, p, seedGatherWait)
			if err != nil {
				s.requests.WithLabelValues("failed").Inc()
				answers <- nil
				return
			}
			s.requests.WithLabelValues("ok").Inc()
			answers <- ans.Days
		}()
	}
	byDay := map[int64][][]keyring.TicketSeed{}
	for range peers {
		days := <-answers
		for _, d := range days {
			if len(d.Seeds) > 0 {
				byDay[d.Day] = append(byDay[d.Day], d.Seeds)
			}
		}
	}
	var took []keyring.DaySeeds
	for day, lists := range byDay {
		if day <= today-int64(keyring.TicketKeyLifetime/keyring.TicketKeyRotation) || day > today+1 || n.seeds.Has(day) {
			continue
		}
		took = append(took, keyring.DaySeeds{Day: day, Seeds: pickSeeds(lists)})
	}
	n.seeds.Fill(took)
	if len(took) > 0 {
		n.log.Info("took the TLS session ticket seeds the members hold", "days", len(took))
	}
	for _, lists := range byDay {
		for _, l := range lists {
			clear(l)
		}
	}
	clearDays(took)
}

// pickSeeds orders one day's seeds as members hold them (each list's
// first seals there): the one most lists seal with first (ties: the
// least), then the others once each.
func pickSeeds(lists [][]keyring.TicketSeed) []keyring.TicketSeed {
	var all []keyring.TicketSeed
	var votes []int
	for _, l := range lists {
		for j, s := range l {
			i := slices.Index(all, s)
			if i < 0 {
				i = len(all)
				all, votes = append(all, s), append(votes, 0)
			}
			if j == 0 {
				votes[i]++
			}
		}
	}
	order := make([]int, len(all))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(x, y int) int {
		if votes[x] != votes[y] {
			return votes[y] - votes[x]
		}
		return slices.Compare(all[x][:], all[y][:])
	})
	out := make([]keyring.TicketSeed, len(all))
	for k, i := range order {
		out[k] = all[i]
	}
	clear(all)
	return out
}

// ask sends a request to node to and waits for its answer (at most
// wait).
func (s *ticketSeeder) ask(ctx context.Context, to string, wait time.Duration) (seedAnswer, error) {
	a, err := s.crypto.newRequest(s.n.cfg.NodeID, to, s.n.store.ClusterID())
	if err != nil {
		return seedAnswer{}, err
	}
	key := hex.EncodeToString(a.req.Nonce)
	ch := make(chan seedAnswerMsg, 1)
	s.mu.Lock()
	s.waiting[key] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiting, key)
		s.mu.Unlock()
	}()
	if err := s.send(to, seedRequestTag, a.msg); err != nil {
		return seedAnswer{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	select {
	case <-ctx.Done():
		return seedAnswer{}, fmt.Errorf("no answer from %s: %w", to, ctx.Err())
	case m := <-ch:
		return s.crypto.openAnswer(a, m)
	}
}

func (s *ticketSeeder) send(to string, tag byte, msg []byte) error {
	if f := s.n.seedRecord.Load(); f != nil {
		(*f)(tag, msg)
	}
	return s.n.members.Send(to, tag, msg, true)
}

// request runs on memberlist's goroutine: it only queues (dropped when
// full; the asker times out).
func (s *ticketSeeder) request(msg []byte) {
	select {
	case s.work <- msg:
	default:
	}
}

// reply runs on memberlist's goroutine: it hands the answer to its asker.
func (s *ticketSeeder) reply(msg []byte) {
	var m seedAnswerMsg
	if json.Unmarshal(msg, &m) != nil {
		return
	}
	s.mu.Lock()
	ch := s.waiting[hex.EncodeToString(m.Nonce)]
	s.mu.Unlock()
	if ch != nil {
		select {
		case ch <- m:
		default:
		}
	}
}

// serve answers requests until stop.
func (s *ticketSeeder) serve(stop <-chan struct{}) {
	defer s.n.bg.Done()
	for {
		select {
		case <-stop:
			return
		case msg := <-s.work:
			if err := s.answer(msg); err != nil {
				s.n.log.Debug("a TLS session ticket seed request was not answered", "error", err)
			}
		}
	}
}

// answer answers one request with every seed this node holds.
func (s *ticketSeeder) answer(msg []byte) error {
	n := s.n
	req, key, err := s.crypto.openRequest(msg)
	if err != nil {
		return err
	}
	if req.To != n.cfg.NodeID {
		return fmt.Errorf("a request for %s reached %s", req.To, n.cfg.NodeID)
	}
	own := n.store.ClusterID()
	if !sameCluster(req.Cluster, own) {
		return fmt.Errorf("a request of %s from cluster %s reached cluster %s", req.From, req.Cluster, own)
	}
	today := keyring.TicketDay(n.ticketTime(time.Now()))
	days := n.seeds.Days()
	defer clearDays(days)
	leader, term := n.store.IsLeader(), n.store.Term()
	ans := seedAnswer{From: n.cfg.NodeID, To: req.From, Cluster: own, Leader: leader, Term: term, Days: days,
		Complete: !s.lacks(today) && (!leader || s.settled.Load() == term)}
	out, err := key.sealAnswer(msg, req, ans)
	if err != nil {
		return err
	}
	return s.send(req.From, seedAnswerTag, out)
}

// noteTicketScheme follows the members' ticket schemes: while an alive
// member seals tickets from the keyring alone (a release before seeds),
// this node does too, and it opens such tickets for keyringTicketsAfter
// after it last saw one.
func (n *Node) noteTicketScheme(now time.Time) {
	mixed, older := false, ""
	if n.members != nil {
		for _, m := range n.members.Members() {
			if m.Alive() && m.Tickets < ticketSeedScheme {
				mixed, older = true, m.ID
				break
			}
		}
	}
	if mixed {
		n.keyringTicketsUntil.Store(now.Add(keyringTicketsAfter).UnixNano())
	}
	if was := n.ticketsMixed.Swap(mixed); was != mixed {
		if mixed {
			n.log.Info("a member runs a release that seals TLS session tickets under keys from the keyring alone: this node does too until every member is upgraded",
				"member", older)
		} else {
			n.log.Info("every member seals TLS session tickets under the day's seed: so does this node; tickets sealed from the keyring alone keep resuming here for 7 days")
		}
	}
}

// ticketScheme is the scheme this node's tickets follow at now.
func (n *Node) ticketScheme(now time.Time) keyring.TicketScheme {
	switch {
	case n.ticketsMixed.Load():
		return keyring.TicketsFromKeyring
	case now.UnixNano() < n.keyringTicketsUntil.Load():
		return keyring.TicketsSeededOpenKeyring
	}
	return keyring.TicketsSeeded
}

// ticketSeedCollector reports the seeds this node holds and the scheme.
type ticketSeedCollector struct {
	n                 *Node
	days, fromKeyring *prometheus.Desc
}

func newTicketSeedCollector(n *Node) *ticketSeedCollector {
	return &ticketSeedCollector{n: n,
		days: prometheus.NewDesc("tether_tls_ticket_seed_days",
			"Days (of the last seven and tomorrow) whose TLS session ticket seed this node holds; 0: it issues no session ticket.", nil, nil),
		fromKeyring: prometheus.NewDesc("tether_tls_tickets_from_keyring",
			"1 while this node seals TLS session tickets under keys from the keyring alone, because a member runs a release before ticket seeds.", nil, nil),
	}
}

func (c *ticketSeedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.days
	ch <- c.fromKeyring
}

func (c *ticketSeedCollector) Collect(ch chan<- prometheus.Metric) {
	days := c.n.seeds.Days()
	clearDays(days)
	v := 0.0
	if c.n.ticketScheme(time.Now()) == keyring.TicketsFromKeyring {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(c.days, prometheus.GaugeValue, float64(len(days)))
	ch <- prometheus.MustNewConstMetric(c.fromKeyring, prometheus.GaugeValue, v)
}
