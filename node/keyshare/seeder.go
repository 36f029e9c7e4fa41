package keyshare

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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

// Seeder keeps this node's seeds: it makes them while this node leads,
// asks the leader for them otherwise, and answers other nodes' requests.
type Seeder struct {
	cfg    SeederConfig
	crypto *seedCrypto // nil without gossip
	ex     *exchange[[]byte, seedAnswerMsg]
	wake   chan struct{}
	// settled is the Raft term whose leader round this node ran (taking
	// the members' seeds or making new ones); 0 while not leading.
	settled atomic.Uint64

	// took is the last answer this node took from a leader; lastAsk and
	// lastPeerAsk (the loop's own) when it last asked the leader, and a
	// member for want of a leader.
	took                 atomic.Pointer[seedSource]
	lastAsk, lastPeerAsk time.Time

	// ticketsMixed: an alive member seals tickets from the keyring alone
	// (a release before seeds); keyringTicketsUntil (Unix ns): until when
	// this node still opens such tickets.
	ticketsMixed        atomic.Bool
	keyringTicketsUntil atomic.Int64

	requests *prometheus.CounterVec // result
	made     prometheus.Counter
}

// SeederConfig is what the seeds need of the node.
type SeederConfig struct {
	NodeID string
	Gossip Gossip // nil without gossip
	Store  Store
	Ring   *keyring.Ring
	Seeds  *keyring.TicketSeeds
	// Secrets are the cluster secrets the node holds (the exchange follows
	// them as they rotate); without them, the fixed Secret.
	Secrets *keyring.Secrets
	Secret  []byte
	// Time is the cluster time at the local instant now: ticket keys
	// change with its UTC day.
	Time func(now time.Time) time.Time
	// Legacy (tests): act as a release before ticket seeds.
	Legacy bool
	// Record (tests) sees every seed request and answer this node sends,
	// as it goes on gossip; FetchOff (tests): ask no leader.
	Record   *atomic.Pointer[func(tag byte, msg []byte)]
	FetchOff *atomic.Bool
	Log      *slog.Logger
}

// seedSource is an answer a member took from the leader.
type seedSource struct {
	leader   string
	term     uint64
	complete bool // authoritative: the leader's seeds were adopted
	at       time.Time
}

// OpenSeeder sets up the seeds' exchange (with gossip) and metrics; Run
// runs it. The exchange takes every cluster secret the node accepts, the
// one in use first.
func OpenSeeder(cfg SeederConfig) (*Seeder, error) {
	s := &Seeder{
		cfg: cfg, wake: make(chan struct{}, 1),
		ex: newExchange(seedQueue, func(msg []byte) ([]byte, bool) { return msg, true },
			func(m seedAnswerMsg) string { return hex.EncodeToString(m.Nonce) }),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_tls_ticket_seed_requests_total",
			Help: "Requests for TLS session ticket seeds this node sent (to the leader, or to the members as a new leader), by result (ok, failed).",
		}, []string{"result"}),
		made: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_tls_ticket_seeds_made_total",
			Help: "TLS session ticket seeds this node made while leading (one a day; more after a whole-cluster restart).",
		}),
	}
	if cfg.Gossip == nil || cfg.Legacy {
		return s, nil
	}
	if cfg.Secrets != nil {
		s.crypto = newSeedCryptoFrom(cfg.Secrets)
	} else {
		c, err := newSeedCrypto(cfg.Secret)
		if err != nil {
			return nil, err
		}
		s.crypto = c
	}
	if err := s.ex.register(cfg.Gossip, seedRequestTag, seedAnswerTag); err != nil {
		return nil, err
	}
	return s, nil
}

// Run makes, fetches and serves the seeds until ctx ends (nothing for a
// release before seeds).
func (s *Seeder) Run(ctx context.Context) {
	if s.cfg.Legacy {
		return
	}
	var wg sync.WaitGroup
	if s.crypto != nil {
		wg.Go(func() { s.serve(ctx.Done()) })
	}
	s.loop(ctx)
	wg.Wait()
}

// Collectors are the seeds' metrics, for the node to register.
func (s *Seeder) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.requests, s.made, newTicketSeedCollector(s)}
}

// Took is the last answer this node took from a leader: whose, and
// whether it was authoritative.
func (s *Seeder) Took() (leader string, complete bool) {
	if t := s.took.Load(); t != nil {
		return t.leader, t.complete
	}
	return "", false
}

// Time is the cluster time at the local instant now, which ticket keys go
// by.
func (s *Seeder) Time(now time.Time) time.Time { return s.cfg.Time(now) }

// wakeUp asks the loop for a round now (never blocks).
func (s *Seeder) wakeUp() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// loop runs the rounds until ctx ends. A wake (a handshake found no key)
// brings the next round forward, to no less than seedWakeSpacing after
// the last: handshakes while tickets are off cost no more rounds.
func (s *Seeder) loop(ctx context.Context) {
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
func (s *Seeder) round(ctx context.Context) time.Duration {
	now := time.Now()
	today := keyring.TicketDay(s.cfg.Time(now))
	s.cfg.Seeds.Prune(today)
	s.noteScheme(now)
	if s.cfg.Store.IsLeader() {
		term := s.cfg.Store.Term()
		if s.settled.Load() != term {
			if s.lacks(today) {
				s.gather(ctx, today)
			}
			s.settled.Store(term)
		}
		for _, day := range []int64{today, today + 1} {
			if s.cfg.Seeds.Generate(day) {
				s.made.Inc()
				s.cfg.Log.Debug("made the TLS session ticket seed of a day", "day", keyring.TicketDayStart(day).Format(time.DateOnly))
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

func (s *Seeder) lacks(today int64) bool {
	return !s.cfg.Seeds.Has(today) || !s.cfg.Seeds.Has(today+1)
}

// speaks reports whether member id is alive and exchanges seeds.
func (s *Seeder) speaks(id string) bool {
	for _, m := range s.cfg.Gossip.Members() {
		if m.ID == id {
			return m.Alive() && m.Tickets >= ticketSeedScheme
		}
	}
	return false
}

// fetch asks the leader for its seeds when this node has not taken a
// complete answer from this leader in this term, lacks today's or
// tomorrow's seed, or asked longer than seedRefresh ago.
func (s *Seeder) fetch(ctx context.Context, today int64, now time.Time) {
	if s.crypto == nil || (s.cfg.FetchOff != nil && s.cfg.FetchOff.Load()) {
		return
	}
	leader, _ := s.cfg.Store.Leader()
	if leader == s.cfg.NodeID {
		return
	}
	if leader == "" || !s.speaks(leader) {
		s.fetchFromPeer(ctx, today, now)
		return
	}
	term := s.cfg.Store.Term()
	last := s.took.Load()
	stale := last == nil || last.leader != leader || last.term != term || !last.complete || s.lacks(today) || now.Sub(last.at) >= seedRefresh
	if !stale || now.Sub(s.lastAsk) < seedRetry {
		return
	}
	s.lastAsk = now
	ans, err := s.ask(ctx, leader, seedAskTimeout)
	if err != nil {
		s.cfg.Log.Debug("asking the leader for the TLS session ticket seeds failed", "leader", leader, "error", err)
		return
	}
	days := ans.Days
	defer clearDays(days)
	took := &seedSource{leader: leader, term: term, at: now}
	if ans.Leader && ans.Complete && ans.Term == term {
		s.cfg.Seeds.Adopt(days)
		took.complete = true
	} else {
		s.cfg.Seeds.Fill(days)
	}
	s.took.Store(took)
	s.cfg.Seeds.Prune(today)
}

// peers are the other alive members that exchange seeds.
func (s *Seeder) peers() []string {
	var peers []string
	for _, m := range s.cfg.Gossip.Members() {
		if m.ID != s.cfg.NodeID && m.Alive() && m.Tickets >= ticketSeedScheme {
			peers = append(peers, m.ID)
		}
	}
	return peers
}

// fetchFromPeer: with no leader to ask (a restarted node before it hears
// from one), a member's seeds let this node seal tickets the others open
// until the leader's answer comes. At most one request a round (lost
// quorum may last).
func (s *Seeder) fetchFromPeer(ctx context.Context, today int64, now time.Time) {
	if !s.lacks(today) || now.Sub(s.lastPeerAsk) < seedRound {
		return
	}
	peers := s.peers()
	if len(peers) == 0 {
		return
	}
	s.lastPeerAsk = now
	peer := peers[mrand.IntN(len(peers))]
	ans, err := s.ask(ctx, peer, seedAskTimeout)
	if err != nil {
		s.cfg.Log.Debug("asking a member for the TLS session ticket seeds failed", "member", peer, "error", err)
		return
	}
	s.cfg.Seeds.Fill(ans.Days)
	clearDays(ans.Days)
	s.cfg.Seeds.Prune(today)
}

// gather runs when this node became leader lacking today's or tomorrow's
// seed: it asks every alive member that exchanges seeds for theirs (for at
// most seedGatherWait) and takes, for each day it lacks, the seed most of
// them seal with (ties: the least), with the others they hold to open.
func (s *Seeder) gather(ctx context.Context, today int64) {
	if s.crypto == nil {
		return
	}
	peers := s.peers()
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
				answers <- nil
				return
			}
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
		if day <= today-int64(keyring.TicketKeyLifetime/keyring.TicketKeyRotation) || day > today+1 || s.cfg.Seeds.Has(day) {
			continue
		}
		took = append(took, keyring.DaySeeds{Day: day, Seeds: pickSeeds(lists)})
	}
	s.cfg.Seeds.Fill(took)
	if len(took) > 0 {
		s.cfg.Log.Info("took the TLS session ticket seeds the members hold", "days", len(took))
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
// wait), counting the request by result.
func (s *Seeder) ask(ctx context.Context, to string, wait time.Duration) (seedAnswer, error) {
	ans, err := s.request(ctx, to, wait)
	result := "ok"
	if err != nil {
		result = "failed"
	}
	s.requests.WithLabelValues(result).Inc()
	return ans, err
}

func (s *Seeder) request(ctx context.Context, to string, wait time.Duration) (seedAnswer, error) {
	a, err := s.crypto.newRequest(s.cfg.NodeID, to, s.cfg.Store.ClusterID())
	if err != nil {
		return seedAnswer{}, err
	}
	replies, done := s.ex.expect(hex.EncodeToString(a.req.Nonce))
	defer done()
	if err := s.send(to, seedRequestTag, a.msg); err != nil {
		return seedAnswer{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	m, err := await(ctx, replies)
	if err != nil {
		return seedAnswer{}, fmt.Errorf("no answer from %s: %w", to, err)
	}
	return s.crypto.openAnswer(a, m)
}

func (s *Seeder) send(to string, tag byte, msg []byte) error {
	if s.cfg.Record != nil {
		if f := s.cfg.Record.Load(); f != nil {
			(*f)(tag, msg)
		}
	}
	return s.cfg.Gossip.Send(to, tag, msg, true)
}

// serve answers requests until stop.
func (s *Seeder) serve(stop <-chan struct{}) {
	s.ex.serve(stop, func(msg []byte) {
		if err := s.answer(msg); err != nil {
			s.cfg.Log.Debug("a TLS session ticket seed request was not answered", "error", err)
		}
	})
}

// answer answers one request with every seed this node holds.
func (s *Seeder) answer(msg []byte) error {
	req, key, err := s.crypto.openRequest(msg)
	if err != nil {
		return err
	}
	if req.To != s.cfg.NodeID {
		return fmt.Errorf("a request for %s reached %s", req.To, s.cfg.NodeID)
	}
	own := s.cfg.Store.ClusterID()
	if !sameCluster(req.Cluster, own) {
		return fmt.Errorf("a request of %s from cluster %s reached cluster %s", req.From, req.Cluster, own)
	}
	today := keyring.TicketDay(s.cfg.Time(time.Now()))
	days := s.cfg.Seeds.Days()
	defer clearDays(days)
	leader, term := s.cfg.Store.IsLeader(), s.cfg.Store.Term()
	ans := seedAnswer{From: s.cfg.NodeID, To: req.From, Cluster: own, Leader: leader, Term: term, Days: days,
		Complete: !s.lacks(today) && (!leader || s.settled.Load() == term)}
	out, err := key.sealAnswer(msg, req, ans)
	if err != nil {
		return err
	}
	return s.send(req.From, seedAnswerTag, out)
}

// noteScheme follows the members' ticket schemes: while an alive
// member seals tickets from the keyring alone (a release before seeds),
// this node does too, and it opens such tickets for keyringTicketsAfter
// after it last saw one.
func (s *Seeder) noteScheme(now time.Time) {
	mixed, older := false, ""
	if s.cfg.Gossip != nil {
		for _, m := range s.cfg.Gossip.Members() {
			if m.Alive() && m.Tickets < ticketSeedScheme {
				mixed, older = true, m.ID
				break
			}
		}
	}
	if mixed {
		s.keyringTicketsUntil.Store(now.Add(keyringTicketsAfter).UnixNano())
	}
	if was := s.ticketsMixed.Swap(mixed); was != mixed {
		if mixed {
			s.cfg.Log.Info("a member runs a release that seals TLS session tickets under keys from the keyring alone: this node does too until every member is upgraded",
				"member", older)
		} else {
			s.cfg.Log.Info("every member seals TLS session tickets under the day's seed: so does this node; tickets sealed from the keyring alone keep resuming here for 7 days")
		}
	}
}

// Scheme is the scheme this node's tickets follow at now.
func (s *Seeder) Scheme(now time.Time) keyring.TicketScheme {
	switch {
	case s.ticketsMixed.Load():
		return keyring.TicketsFromKeyring
	case now.UnixNano() < s.keyringTicketsUntil.Load():
		return keyring.TicketsSeededOpenKeyring
	}
	return keyring.TicketsSeeded
}

// ticketSeedCollector reports the seeds this node holds and the scheme.
type ticketSeedCollector struct {
	s                 *Seeder
	days, fromKeyring *prometheus.Desc
}

func newTicketSeedCollector(s *Seeder) *ticketSeedCollector {
	return &ticketSeedCollector{s: s,
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
	days := c.s.cfg.Seeds.Days()
	clearDays(days)
	v := 0.0
	if c.s.Scheme(time.Now()) == keyring.TicketsFromKeyring {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(c.days, prometheus.GaugeValue, float64(len(days)))
	ch <- prometheus.MustNewConstMetric(c.fromKeyring, prometheus.GaugeValue, v)
}

// TicketSource gives the listeners the TLS session ticket keys derived
// from the replicated keyring and the day's seed, by the cluster time:
// ticket keys change with the UTC day, and the members' median clock is
// one every node reads within seconds of the others (keyring.TicketKeyGrace
// covers that), which no single node's clock moves. Without keys (no seed
// yet, no active key) the listeners issue no ticket. A release before
// seeds (Legacy) took keys from the keyring alone, and local tickets
// without them.
func (s *Seeder) TicketSource() interface {
	TicketKeys(now time.Time) [][32]byte
} {
	if s.cfg.Legacy {
		return keyringTicketSource{s}
	}
	return ticketKeySource{s}
}

type ticketKeySource struct{ s *Seeder }

func (t ticketKeySource) TicketKeys(now time.Time) [][32]byte {
	s := t.s
	keys := s.cfg.Ring.TicketKeysWith(s.cfg.Time(now), s.cfg.Seeds, s.Scheme(now))
	if len(keys) == 0 {
		s.wakeUp()
	}
	return keys
}

// PausesTickets: without keys the listeners issue no ticket
// (frontdoor.TicketPauser).
func (ticketKeySource) PausesTickets() bool { return true }

type keyringTicketSource struct{ s *Seeder }

func (t keyringTicketSource) TicketKeys(now time.Time) [][32]byte {
	return t.s.cfg.Ring.TicketKeys(t.s.cfg.Time(now))
}

// SchemeAdvertised is what a node gossips in cluster.Meta.Tickets
// (legacy: a release before ticket seeds, in tests).
func SchemeAdvertised(legacy bool) int {
	if legacy {
		return 0
	}
	return ticketSeedScheme
}
