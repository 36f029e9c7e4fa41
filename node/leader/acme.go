package leader

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mholt/acmez/v3"
	"github.com/mholt/acmez/v3/acme"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/frontdoor"
	"github.com/tether-proxy/tether/store"
)

// ACME: the leader obtains and renews the certificates that listeners'
// Acme blocks ask for, with mholt/acmez for the protocol; the account,
// the certificates (private keys wrapped) and the challenges pending
// validation live in the replicated ACME state (store/acme.go), so every
// node serves the certificates and answers the CA's validation requests.

// Names of the ACME state's entries. Ids are hashes of the Acme block's
// name (directory and domains) or of the account (directory and email).
const (
	acmeAccountPrefix = "account/"
	AcmeCertPrefix    = "cert/"
	acmeStatusPrefix  = "status/"
	AcmeHTTP01Prefix  = "http-01/"     // + token: the key authorization
	acmeALPN01Prefix  = "tls-alpn-01/" // + domain: the key authorization
)

// Timings of the ACME manager.
const (
	// acmeInterval is how often the leader looks for certificates to
	// obtain or renew.
	acmeInterval = time.Second
	// acmeRenewFraction: a certificate is renewed once less than
	// 1/acmeRenewFraction of its lifetime is left.
	acmeRenewFraction = 3
	// acmeOrderTimeout bounds one order, challenges included.
	acmeOrderTimeout = 5 * time.Minute
	// acmeBackoffMin and acmeBackoffMax bound the wait after a failed
	// order; it doubles with each failure in a row.
	acmeBackoffMin = time.Minute
	acmeBackoffMax = 6 * time.Hour
)

// AcmeID names an entry of the ACME state: a hash of the Acme block's
// name, or of the account's directory and email.
func AcmeID(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:12])
}

// AcmeCertRecord is a certificate entry (secret: it holds the key).
type AcmeCertRecord struct {
	Name      string    `json:"name"`
	Domains   []string  `json:"domains"`
	ChainPEM  []byte    `json:"chain"`
	KeyPEM    []byte    `json:"key"`
	NotBefore time.Time `json:"not_before"`
	NotAfter  time.Time `json:"not_after"`
}

// acmeAccountRecord is an account entry (secret).
type acmeAccountRecord struct {
	Directory string `json:"directory"`
	Email     string `json:"email,omitempty"`
	Location  string `json:"location"`
	KeyPEM    []byte `json:"key"`
}

// AcmeStatus is where one certificate stands, replicated so that every
// node reports it (GET /v1/status, metrics, the cluster page).
type AcmeStatus struct {
	Domains   []string  `json:"domains"`
	Directory string    `json:"directory"`
	NotBefore time.Time `json:"not_before,omitzero"`
	NotAfter  time.Time `json:"not_after,omitzero"`
	// RenewAt is when the leader renews it (a third of its lifetime left).
	RenewAt     time.Time `json:"renew_at,omitzero"`
	LastSuccess time.Time `json:"last_success,omitzero"`
	LastAttempt time.Time `json:"last_attempt,omitzero"`
	// Failures counts failed orders in a row; LastError is the last one's.
	Failures    int       `json:"failures"`
	LastError   string    `json:"last_error,omitempty"`
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	// ObtainedBy is the node that led when the certificate was obtained.
	ObtainedBy string `json:"obtained_by,omitempty"`
}

// renewAt is when a certificate valid from nb to na is renewed.
func renewAt(nb, na time.Time) time.Time {
	return na.Add(-na.Sub(nb) / acmeRenewFraction)
}

// acmeBackoff is the wait after failures failed orders in a row.
func acmeBackoff(failures int, min time.Duration) time.Duration {
	d := min
	for i := 1; i < failures && d < acmeBackoffMax; i++ {
		d *= 2
	}
	return mind(d, acmeBackoffMax)
}

func mind(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

// AcmeView is this node's reading of the replicated ACME state: it
// implements frontdoor.AcmeSource, rebuilding what it serves only when the
// state changed.
type AcmeView struct {
	st  AcmeStore
	log *slog.Logger
	mu  sync.Mutex
	cur atomic.Pointer[acmeServed]
}

var _ frontdoor.AcmeSource = (*AcmeView)(nil)

type acmeServed struct {
	version uint64
	certs   map[string]*tls.Certificate // by Acme block name
	http01  map[string]string           // token: key authorization
	alpn01  map[string]*tls.Certificate // domain: challenge certificate
}

func (v *AcmeView) served() *acmeServed {
	ver := v.st.AcmeVersion()
	if s := v.cur.Load(); s != nil && s.version == ver {
		return s
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if s := v.cur.Load(); s != nil && s.version == ver {
		return s
	}
	entries, ver := v.st.Acme("")
	s := &acmeServed{version: ver, certs: map[string]*tls.Certificate{}, http01: map[string]string{}, alpn01: map[string]*tls.Certificate{}}
	for _, e := range entries {
		switch {
		case strings.HasPrefix(e.Name, AcmeCertPrefix):
			var rec AcmeCertRecord
			if err := json.Unmarshal(e.Value, &rec); err != nil {
				v.log.Error("acme: unreadable certificate entry", "entry", e.Name, "err", err)
				continue
			}
			c, err := tls.X509KeyPair(rec.ChainPEM, rec.KeyPEM)
			if err != nil {
				v.log.Error("acme: unusable certificate", "domains", rec.Domains, "err", err)
				continue
			}
			s.certs[rec.Name] = &c
		case strings.HasPrefix(e.Name, AcmeHTTP01Prefix):
			s.http01[strings.TrimPrefix(e.Name, AcmeHTTP01Prefix)] = string(e.Value)
		case strings.HasPrefix(e.Name, acmeALPN01Prefix):
			domain := strings.TrimPrefix(e.Name, acmeALPN01Prefix)
			c, err := acmez.TLSALPN01ChallengeCert(acme.Challenge{
				Type: acme.ChallengeTypeTLSALPN01, Identifier: acme.Identifier{Type: "dns", Value: domain}, KeyAuthorization: string(e.Value),
			})
			if err != nil {
				v.log.Error("acme: building a TLS-ALPN-01 certificate", "domain", domain, "err", err)
				continue
			}
			s.alpn01[domain] = c
		}
	}
	v.cur.Store(s)
	return s
}

func (v *AcmeView) AcmeCertificate(name string) *tls.Certificate { return v.served().certs[name] }

func (v *AcmeView) AcmeHTTPChallenge(token string) (string, bool) {
	ka, ok := v.served().http01[token]
	return ka, ok
}

func (v *AcmeView) AcmeTLSALPNChallenge(serverName string) (*tls.Certificate, bool) {
	c, ok := v.served().alpn01[serverName]
	return c, ok
}

// Statuses reads every certificate's status, sorted by domains.
func (v *AcmeView) Statuses() []AcmeStatus {
	entries, _ := v.st.Acme(acmeStatusPrefix)
	out := make([]AcmeStatus, 0, len(entries))
	for _, e := range entries {
		var s AcmeStatus
		if json.Unmarshal(e.Value, &s) == nil {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b AcmeStatus) int {
		return strings.Compare(strings.Join(a.Domains, ","), strings.Join(b.Domains, ","))
	})
	return out
}

// acmeManager is the leader's side: it orders certificates.
type acmeManager struct {
	l *Leader
	// backoffMin is acmeBackoffMin (tests shorten it).
	backoffMin time.Duration
	orders     *prometheus.CounterVec
	// clients are the ACME clients by directory and CA file, kept for the
	// nonces and directory they cache.
	clients map[string]*acme.Client
	// hold is this leader's own backoff by Acme block name, for when the
	// replicated status cannot be written (a member that does not apply
	// AcmeWrite yet, no quorum): the CA must not be asked every round.
	hold map[string]time.Time
}

func newAcmeManager(l *Leader) *acmeManager {
	return &acmeManager{
		l: l, backoffMin: acmeBackoffMin, clients: map[string]*acme.Client{}, hold: map[string]time.Time{},
		orders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_acme_orders_total",
			Help: "ACME orders this node placed as the leader, by result (success, failure; held: not placed, the replicated state could not be written).",
		}, []string{"result"}),
	}
}

// EventAcme: a certificate was obtained, or an order failed (the page
// shows it on every node: each reports the replicated status's changes).
const EventAcme = "acme"

// AcmeLoop runs on every node until ctx ends: the leader orders; every
// node turns changes of the replicated status into events.
func (l *Leader) AcmeLoop(ctx context.Context) {
	t := time.NewTicker(acmeInterval)
	defer t.Stop()
	seen := map[string]AcmeStatus{}
	for first := true; ; first = false {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.acmeEvents(seen, first)
		blocks := l.cfg.AcmeBlocks()
		if len(blocks) == 0 || !l.cfg.Store.IsLeader() || !l.CaughtUp() {
			continue
		}
		l.acme.dropStaleChallenges()
		for _, a := range blocks {
			if ctx.Err() != nil {
				return
			}
			l.acme.maybeOrder(ctx, a, time.Now())
		}
	}
}

// acmeEvents publishes what changed in the replicated status since seen
// (nothing the first time: the state a node starts with is not news).
func (l *Leader) acmeEvents(seen map[string]AcmeStatus, quiet bool) {
	for _, s := range l.acmeView.Statuses() {
		key := s.Directory + " " + strings.Join(s.Domains, ",")
		old, had := seen[key]
		seen[key] = s
		if quiet {
			continue
		}
		switch {
		case !s.LastSuccess.IsZero() && (!had || !s.LastSuccess.Equal(old.LastSuccess)):
			l.cfg.Publish(EventAcme, s.LastSuccess, map[string]any{"domains": s.Domains, "result": "obtained",
				"not_after": s.NotAfter, "renew_at": s.RenewAt, "by": s.ObtainedBy})
		case s.Failures > 0 && (!had || s.Failures != old.Failures):
			l.cfg.Publish(EventAcme, s.LastAttempt, map[string]any{"domains": s.Domains, "result": "failed",
				"failures": s.Failures, "error": s.LastError, "next_attempt": s.NextAttempt})
		}
	}
}

// dropStaleChallenges deletes challenges left by an order that did not
// clean up (its leader lost leadership or stopped mid-order). Orders run
// one at a time on this goroutine, so between two none is pending.
func (m *acmeManager) dropStaleChallenges() {
	var names []string
	for _, p := range []string{AcmeHTTP01Prefix, acmeALPN01Prefix} {
		entries, _ := m.l.cfg.AcmeStore.Acme(p)
		for _, e := range entries {
			names = append(names, e.Name)
		}
	}
	if len(names) == 0 {
		return
	}
	// At most 64 changes a write (the store's bound); the rest next round.
	if _, err := m.l.cfg.Store.Apply(store.AcmeWrite{Delete: names[:min(len(names), 64)]}); err != nil {
		m.l.log.Warn("acme: deleting stale challenges", "err", err)
	}
}

// status is the replicated status of a's certificate.
func (m *acmeManager) status(a config.Acme) AcmeStatus {
	e, ok := m.l.cfg.AcmeStore.AcmeEntry(acmeStatusPrefix + AcmeID(a.Name()))
	var s AcmeStatus
	if ok {
		_ = json.Unmarshal(e.Value, &s)
	}
	return s
}

// maybeOrder orders a certificate for a when it needs one at now: none
// yet, or a third of its lifetime left; unless a backoff after failures
// holds it.
func (m *acmeManager) maybeOrder(ctx context.Context, a config.Acme, now time.Time) {
	s := m.status(a)
	_, haveCert := m.l.cfg.AcmeStore.AcmeEntry(AcmeCertPrefix + AcmeID(a.Name()))
	if haveCert && now.Before(s.RenewAt) {
		return
	}
	if now.Before(s.NextAttempt) || now.Before(m.hold[a.Name()]) {
		return
	}
	octx, cancel := context.WithTimeout(ctx, acmeOrderTimeout)
	defer cancel()
	s.Domains, s.Directory, s.LastAttempt = slices.Clone(a.Domains), a.Directory, now
	// The attempt is recorded first: a state this leader cannot write (a
	// member that does not apply AcmeWrite yet, no quorum) would lose the
	// account or the certificate the CA hands out, so the CA is not asked.
	if err := m.writeStatus(a, s, nil); err != nil {
		m.orders.WithLabelValues("held").Inc()
		m.hold[a.Name()] = now.Add(m.backoffMin)
		m.l.log.Warn("acme: the replicated state cannot be written; not ordering", "domains", a.Domains,
			"next_attempt", m.hold[a.Name()].Format(time.RFC3339), "err", err)
		return
	}
	rec, err := m.order(octx, a)
	if err != nil {
		if ctx.Err() != nil || !m.l.cfg.Store.IsLeader() {
			return // stopping, or no longer the leader: the next one tries
		}
		m.orders.WithLabelValues("failure").Inc()
		s.Failures++
		s.LastError = err.Error()
		s.NextAttempt = time.Now().Add(acmeBackoff(s.Failures, m.backoffMin))
		m.l.log.Error("acme: obtaining a certificate failed; the current one (if any) is still served",
			"domains", a.Domains, "failures", s.Failures, "next_attempt", s.NextAttempt.Format(time.RFC3339), "err", err)
		if werr := m.writeStatus(a, s, nil); werr != nil {
			// Held here too, or an unwritable state would have the CA
			// asked every round.
			m.hold[a.Name()] = s.NextAttempt
			m.l.log.Warn("acme: recording the failure", "err", werr)
		}
		return
	}
	m.orders.WithLabelValues("success").Inc()
	s.Failures, s.LastError, s.NextAttempt = 0, "", time.Time{}
	s.NotBefore, s.NotAfter, s.RenewAt = rec.NotBefore, rec.NotAfter, renewAt(rec.NotBefore, rec.NotAfter)
	s.LastSuccess, s.ObtainedBy = time.Now(), m.l.cfg.Self
	if err := m.writeStatus(a, s, rec); err != nil {
		m.hold[a.Name()] = time.Now().Add(m.backoffMin)
		m.l.log.Error("acme: storing the certificate failed; ordering again later", "domains", a.Domains,
			"next_attempt", m.hold[a.Name()].Format(time.RFC3339), "err", err)
		return
	}
	delete(m.hold, a.Name())
	m.l.log.Info("acme: certificate obtained", "domains", a.Domains, "not_after", rec.NotAfter.Format(time.RFC3339), "renew_at", s.RenewAt.Format(time.RFC3339))
}

// writeStatus commits the status and, after a success, the certificate,
// in one entry.
func (m *acmeManager) writeStatus(a config.Acme, s AcmeStatus, rec *AcmeCertRecord) error {
	id := AcmeID(a.Name())
	sb, err := json.Marshal(s)
	if err != nil {
		return err
	}
	w := store.AcmeWrite{Put: []store.AcmeEntry{{Name: acmeStatusPrefix + id, Value: sb}}}
	if rec != nil {
		cb, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		w.Put = append(w.Put, store.AcmeEntry{Name: AcmeCertPrefix + id, Secret: true, Value: cb})
	}
	_, err = m.l.cfg.Store.Apply(w)
	return err
}

// client is the ACME client for a's directory, trusting a.CA when set.
func (m *acmeManager) client(a config.Acme) (*acme.Client, error) {
	key := a.Directory + "\x00" + a.CA
	if c, ok := m.clients[key]; ok {
		return c, nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if a.CA != "" {
		b, err := os.ReadFile(a.CA)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("%s holds no PEM certificate", a.CA)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	c := &acme.Client{
		Directory:  a.Directory,
		HTTPClient: &http.Client{Transport: tr, Timeout: time.Minute},
		UserAgent:  "tether/" + m.l.cfg.Version,
		Logger:     m.l.log.With("component", "acme"),
	}
	m.clients[key] = c
	return c, nil
}

// account loads the cluster's account at a's directory, registering one
// (and committing it) the first time.
func (m *acmeManager) account(ctx context.Context, c *acme.Client, a config.Acme) (acme.Account, error) {
	name := acmeAccountPrefix + AcmeID(a.Directory+"\x00"+a.Email)
	var contact []string
	if a.Email != "" {
		contact = []string{"mailto:" + a.Email}
	}
	if e, ok := m.l.cfg.AcmeStore.AcmeEntry(name); ok {
		var rec acmeAccountRecord
		if err := json.Unmarshal(e.Value, &rec); err != nil {
			return acme.Account{}, fmt.Errorf("the stored account: %w", err)
		}
		key, err := parseKey(rec.KeyPEM)
		if err != nil {
			return acme.Account{}, fmt.Errorf("the stored account key: %w", err)
		}
		return acme.Account{Status: acme.StatusValid, Contact: contact, TermsOfServiceAgreed: true, Location: rec.Location, PrivateKey: key}, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return acme.Account{}, err
	}
	acct, err := c.NewAccount(ctx, acme.Account{Contact: contact, TermsOfServiceAgreed: true, PrivateKey: key})
	if err != nil {
		return acme.Account{}, fmt.Errorf("registering an account: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return acme.Account{}, err
	}
	b, err := json.Marshal(acmeAccountRecord{Directory: a.Directory, Email: a.Email, Location: acct.Location,
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})})
	if err != nil {
		return acme.Account{}, err
	}
	if _, err := m.l.cfg.Store.Apply(store.AcmeWrite{Put: []store.AcmeEntry{{Name: name, Secret: true, Value: b}}}); err != nil {
		return acme.Account{}, fmt.Errorf("storing the account: %w", err)
	}
	m.l.log.Info("acme: account registered", "directory", a.Directory, "account", acct.Location)
	return acct, nil
}

func parseKey(p []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(p)
	if b == nil {
		return nil, errors.New("no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T cannot sign", k)
	}
	return s, nil
}

// order obtains a certificate for a: one order for all its domains.
func (m *acmeManager) order(ctx context.Context, a config.Acme) (*AcmeCertRecord, error) {
	c, err := m.client(a)
	if err != nil {
		return nil, err
	}
	acct, err := m.account(ctx, c, a)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	solver := &acmeSolver{m: m}
	cl := acmez.Client{Client: c, ChallengeSolvers: map[string]acmez.Solver{
		acme.ChallengeTypeHTTP01:    solver,
		acme.ChallengeTypeTLSALPN01: solver,
	}}
	certs, err := cl.ObtainCertificateForSANs(ctx, acct, key, a.Domains)
	if err != nil {
		return nil, err
	}
	if len(certs) == 0 {
		return nil, errors.New("the CA returned no certificate")
	}
	chain := certs[0].ChainPEM
	b, _ := pem.Decode(chain)
	if b == nil {
		return nil, errors.New("the CA returned no PEM certificate")
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the CA's certificate: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &AcmeCertRecord{
		Name: a.Name(), Domains: slices.Clone(a.Domains), ChainPEM: chain,
		KeyPEM:    pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter,
	}, nil
}

// acmeSolver answers HTTP-01 and TLS-ALPN-01 challenges through the
// replicated state: Present commits the key authorization, Wait holds the
// CA back until every alive member applied it (whichever node the CA
// reaches answers), CleanUp deletes it.
type acmeSolver struct {
	m *acmeManager
}

var (
	_ acmez.Solver = (*acmeSolver)(nil)
	_ acmez.Waiter = (*acmeSolver)(nil)
)

func challengeEntry(chal acme.Challenge) (string, error) {
	switch chal.Type {
	case acme.ChallengeTypeHTTP01:
		return AcmeHTTP01Prefix + chal.Token, nil
	case acme.ChallengeTypeTLSALPN01:
		return acmeALPN01Prefix + strings.ToLower(chal.Identifier.Value), nil
	}
	return "", fmt.Errorf("challenge type %q is not answered", chal.Type)
}

func (s *acmeSolver) Present(ctx context.Context, chal acme.Challenge) error {
	name, err := challengeEntry(chal)
	if err != nil {
		return err
	}
	_, err = s.m.l.cfg.Store.Apply(store.AcmeWrite{Put: []store.AcmeEntry{{Name: name, Value: []byte(chal.KeyAuthorization)}}})
	return err
}

func (s *acmeSolver) Wait(ctx context.Context, chal acme.Challenge) error {
	index := s.m.l.cfg.Store.AppliedIndex()
	deadline := time.Now().Add(ActivationWait)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		l, _ := s.m.l.keyLaggards(index)
		if len(l) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			s.m.l.log.Warn("acme: asking the CA to validate before every member holds the challenge", "laggards", l)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (s *acmeSolver) CleanUp(ctx context.Context, chal acme.Challenge) error {
	name, err := challengeEntry(chal)
	if err != nil {
		return err
	}
	_, err = s.m.l.cfg.Store.Apply(store.AcmeWrite{Delete: []string{name}})
	return err
}

// AcmeView is what this node serves of the replicated ACME state.
func (l *Leader) AcmeView() *AcmeView { return l.acmeView }

// acmeCollector exports the replicated ACME status on every node.
type acmeCollector struct {
	v                           *AcmeView
	notAfter, renewAt, failures *prometheus.Desc
	lastSuccess                 *prometheus.Desc
}

func newAcmeCollector(v *AcmeView) *acmeCollector {
	l := []string{"domains"}
	return &acmeCollector{
		v:           v,
		notAfter:    prometheus.NewDesc("tether_acme_certificate_not_after_timestamp_seconds", "When the ACME certificate served expires (Unix time).", l, nil),
		renewAt:     prometheus.NewDesc("tether_acme_certificate_renew_timestamp_seconds", "When the leader renews the ACME certificate (Unix time).", l, nil),
		failures:    prometheus.NewDesc("tether_acme_failures", "Failed ACME orders in a row for the certificate (0: the last one succeeded).", l, nil),
		lastSuccess: prometheus.NewDesc("tether_acme_last_success_timestamp_seconds", "When the certificate was last obtained (Unix time).", l, nil),
	}
}

func (c *acmeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.notAfter
	ch <- c.renewAt
	ch <- c.failures
	ch <- c.lastSuccess
}

func (c *acmeCollector) Collect(ch chan<- prometheus.Metric) {
	unix := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return float64(t.UnixMilli()) / 1000
	}
	for _, s := range c.v.Statuses() {
		d := strings.Join(s.Domains, ",")
		ch <- prometheus.MustNewConstMetric(c.notAfter, prometheus.GaugeValue, unix(s.NotAfter), d)
		ch <- prometheus.MustNewConstMetric(c.renewAt, prometheus.GaugeValue, unix(s.RenewAt), d)
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.GaugeValue, float64(s.Failures), d)
		ch <- prometheus.MustNewConstMetric(c.lastSuccess, prometheus.GaugeValue, unix(s.LastSuccess), d)
	}
}
