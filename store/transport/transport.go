package transport

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tether-proxy/tether/internal/logging"
	"github.com/tether-proxy/tether/keyring"
)

// Raft connections: TLS 1.3, then each side proves it knows the cluster
// secret by sending HMAC-SHA256(authKey, role | exporter) where exporter is
// keying material exported from this very TLS session (RFC 8446 §7.5). A
// man in the middle holds two sessions with two different exporters, so it
// can neither forward nor forge a proof. The server verifies the client's
// proof before it sends its own, so a client without the secret learns
// nothing. Without TLSFiles both sides use throwaway self-signed
// certificates (the proof is the authentication); with them, certificates
// must chain to the CA as well.
//
// Version 2 (negotiated by TLS ALPN, so a peer of an earlier release still
// speaks version 1 during a rolling upgrade) binds the cluster id into the
// proof: each side sends its cluster id with HMAC(authKey, role | exporter |
// cluster id), and a peer whose id differs from ours (both set) is refused.
// Two clusters that share a secret therefore never exchange a Raft RPC, even
// through a reused address; a node without an id yet (forming, or new and
// waiting to be added) is accepted and takes the cluster's id from the log.
// Version 1 is refused once the node's policy says every member speaks
// version 2 (SetLegacyHandshake).
//
// While the cluster secret is rotated a node holds several (keyring.Secrets):
// a client proves with the primary's authKey, and with the other accepted
// secrets in turn when the server refuses it (a peer that was down while
// the new secret was installed holds only the old one until it catches up
// from the log); a server checks the proof against every accepted secret
// and answers with the one that matched. A connection authenticated under
// a secret that is later removed is cut.

// InfoAuth is the keyring.DeriveKEK info of the key proofs are made with
// (authKey above).
const InfoAuth = "tether raft transport v1"

const (
	exporterLabel    = "EXPORTER-tether-raft-auth-v1"
	alpnV2           = "tether-raft-2" // the handshake with cluster ids
	maxWireClusterID = 1024
	proofLen         = sha256.Size
	// maxPendingHandshakes bounds concurrent handshakes; connections beyond
	// it are closed at once rather than queued.
	maxPendingHandshakes = 256
	// refusalLogEvery: a refused connection is logged at most once per
	// reason in this time; the next line says how many were held back.
	refusalLogEvery = 30 * time.Second
)

// TLSFiles name the PEM files of mutual TLS between Raft peers: this node's
// certificate and key, and the CA that signs every peer's certificate.
type TLSFiles struct{ CertFile, KeyFile, CAFile string }

// Options are the layer's settings; the zero value is what a node runs
// with. Dial, Wrap and Now are for tests (a network that fails on cue, a
// clock for the rate-limited log lines).
type Options struct {
	// HandshakeTimeout bounds a connection's TLS handshake and secret
	// exchange, on both sides (0: 5 s).
	HandshakeTimeout time.Duration
	Dial             func(from, to string) error                // before every dial; an error fails it
	Wrap             func(from, to string, c net.Conn) net.Conn // every dialed raw connection
	Now              func() time.Time                           // nil: time.Now
}

// defaultHandshakeTimeout is HandshakeTimeout's default.
const defaultHandshakeTimeout = 5 * time.Second

// Reasons a Raft connection is refused (Layer.Refused, and the metric
// tether_raft_connections_refused_total{reason}).
const (
	RefusedBusy      = "busy"         // maxPendingHandshakes handshakes were running
	RefusedTLS       = "tls"          // no TLS 1.3 handshake (not TLS, wrong certificate, ...)
	RefusedTimeout   = "timeout"      // the handshake did not finish within its deadline
	RefusedClosed    = "closed"       // the peer closed the connection before proving anything
	RefusedSecret    = "wrong_secret" // a proof not made with any secret this node accepts
	RefusedClusterID = "cluster_id"   // the peer belongs to another cluster
	RefusedV1        = "v1_handshake" // the peer speaks handshake version 1, which the policy refuses
)

// refusal is a handshake error with its reason.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// refuse classifies err: a timeout or a close where a reason says
// otherwise.
func refuse(reason string, err error) error {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		reason = RefusedTimeout
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		reason = RefusedClosed
	}
	return &refusal{reason, err}
}

func reasonOf(err error) string {
	var r *refusal
	if errors.As(err, &r) {
		return r.reason
	}
	return RefusedTLS
}

var errStreamClosed = errors.New("store: raft stream layer closed")

// Layer is a raft.StreamLayer over TCP with the handshake above.
// Accept only returns authenticated connections; handshakes run in their
// own goroutines with a deadline, so a stalled peer never blocks Accept.
type Layer struct {
	ln        net.Listener
	advertise advertised
	serverTLS *tls.Config
	clientTLS *tls.Config
	secrets   *keyring.Secrets
	clusterID atomic.Pointer[func() string] // this node's cluster id ("" until known)
	allowV1   atomic.Pointer[func() bool]   // nil: version 1 is accepted
	timeout   time.Duration
	opts      Options
	logger    *slog.Logger

	refused *logging.Refusals

	ready     chan net.Conn
	pending   chan struct{} // semaphore of running server handshakes
	mu        sync.Mutex
	inflight  map[net.Conn]struct{}  // raw conns mid-handshake, closed by Close
	live      map[*liveConn]struct{} // authenticated conns, closed by closeAll
	cut       bool                   // closeAll ran: no more dials
	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

var _ raft.StreamLayer = (*Layer)(nil)

// advertised is a net.Addr that may hold a host name.
type advertised string

func (a advertised) Network() string { return "tcp" }
func (a advertised) String() string  { return string(a) }

func New(ln net.Listener, advertise string, secrets *keyring.Secrets, files *TLSFiles, opts Options, logger *slog.Logger) (*Layer, error) {
	serverTLS, clientTLS, err := transportTLS(files, logger)
	if err != nil {
		return nil, err
	}
	timeout := opts.HandshakeTimeout
	if timeout <= 0 {
		timeout = defaultHandshakeTimeout
	}
	l := &Layer{
		ln: ln, advertise: advertised(advertise), serverTLS: serverTLS, clientTLS: clientTLS,
		secrets: secrets, timeout: timeout, opts: opts, logger: logger,
		ready:    make(chan net.Conn),
		pending:  make(chan struct{}, maxPendingHandshakes),
		closed:   make(chan struct{}),
		inflight: map[net.Conn]struct{}{},
		live:     map[*liveConn]struct{}{},
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	l.refused = logging.NewRefusals(logger, "raft connection refused (logged once per reason every 30s; tether_raft_connections_refused_total counts them all)", refusalLogEvery, now)
	secrets.Watch(l.cutRetired)
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// Refused is how many connections were refused, by reason.
func (l *Layer) Refused() map[string]uint64 { return l.refused.Counts() }

// SetClusterID gives the layer this node's cluster id ("" until known),
// read at every handshake.
func (l *Layer) SetClusterID(id func() string) { l.clusterID.Store(&id) }

// SetLegacyHandshake sets the policy for handshake version 1: allowed is
// asked at every handshake (unset: allowed).
func (l *Layer) SetLegacyHandshake(allowed func() bool) { l.allowV1.Store(&allowed) }

// v1Allowed reports whether a peer may speak handshake version 1.
func (l *Layer) v1Allowed() bool {
	if f := l.allowV1.Load(); f != nil {
		return (*f)()
	}
	return true
}

// cutRetired closes the authenticated connections whose proof used a
// secret this node no longer accepts (it was removed): whoever made them
// must prove again, with a secret the cluster holds.
func (l *Layer) cutRetired() {
	accepted := l.secrets.AcceptedIDs()
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.live {
		if !slices.Contains(accepted, c.secretID) {
			c.raw.Close()
		}
	}
}

// transportTLS builds both TLS configs: mutual TLS from files, or an
// ephemeral self-signed certificate that nobody verifies.
func transportTLS(files *TLSFiles, logger *slog.Logger) (server, client *tls.Config, err error) {
	if files == nil {
		cert, err := selfSigned()
		if err != nil {
			return nil, nil, err
		}
		server = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, NextProtos: []string{alpnV2}}
		// The secret proof authenticates the server, not its certificate.
		client = &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, NextProtos: []string{alpnV2}}
		return server, client, nil
	}
	src := &certFiles{files: *files, logger: logger}
	if _, err := src.load(); err != nil {
		return nil, nil, err // bad files fail Open
	}
	// Peers dial IPs or names that certificates need not list, so verify the
	// chain to the cluster CA but not the host name: any certificate the CA
	// signed is a member (and must still know the secret).
	verify := func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("peer sent no certificate")
		}
		m, err := src.load()
		if err != nil {
			return err
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err = cs.PeerCertificates[0].Verify(x509.VerifyOptions{
			Roots: m.pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
		})
		return err
	}
	server = &tls.Config{
		MinVersion: tls.VersionTLS13, NextProtos: []string{alpnV2}, ClientAuth: tls.RequireAnyClientCert, VerifyConnection: verify,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			m, err := src.load()
			if err != nil {
				return nil, err
			}
			return m.cert, nil
		},
	}
	client = &tls.Config{
		MinVersion: tls.VersionTLS13, NextProtos: []string{alpnV2},
		// Skips only the host name check: verify checks the chain.
		InsecureSkipVerify: true, VerifyConnection: verify,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			m, err := src.load()
			if err != nil {
				return nil, err
			}
			return m.cert, nil
		},
	}
	return server, client, nil
}

// certFiles reads the TLS files again at every handshake (they are small and
// handshakes are rare: raft pools its connections), so replacing them
// rotates certificates without a restart. A set that does not load (e.g.
// half written) is logged and the last good one stays in use.
type certFiles struct {
	files  TLSFiles
	logger *slog.Logger

	mu   sync.Mutex
	raw  [3][]byte
	good *certMaterial
}

type certMaterial struct {
	cert *tls.Certificate
	pool *x509.CertPool
}

func (c *certFiles) load() (*certMaterial, error) {
	var raw [3][]byte
	var err error
	for i, path := range []string{c.files.CertFile, c.files.KeyFile, c.files.CAFile} {
		if raw[i], err = os.ReadFile(path); err != nil {
			err = fmt.Errorf("raft TLS: %w", err)
			break
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && c.good != nil && bytes.Equal(raw[0], c.raw[0]) && bytes.Equal(raw[1], c.raw[1]) && bytes.Equal(raw[2], c.raw[2]) {
		return c.good, nil
	}
	var m *certMaterial
	if err == nil {
		m, err = parseCertFiles(c.files, raw)
	}
	if err != nil {
		if c.good == nil {
			return nil, err
		}
		c.logger.Warn("raft TLS files do not load; still using the previous ones", "err", err)
		return c.good, nil
	}
	if c.good != nil {
		c.logger.Info("raft TLS certificates reloaded", "cert", c.files.CertFile, "ca", c.files.CAFile)
	}
	c.raw, c.good = raw, m
	return m, nil
}

func parseCertFiles(files TLSFiles, raw [3][]byte) (*certMaterial, error) {
	cert, err := tls.X509KeyPair(raw[0], raw[1])
	if err != nil {
		return nil, fmt.Errorf("raft TLS certificate %s / key %s: %w", files.CertFile, files.KeyFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw[2]) {
		return nil, fmt.Errorf("raft TLS CA %s: no PEM certificate in it", files.CAFile)
	}
	return &certMaterial{&cert, pool}, nil
}

func selfSigned() (tls.Certificate, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "tether raft"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(100 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, nil
}

func (l *Layer) acceptLoop() {
	defer l.wg.Done()
	var delay time.Duration
	for {
		raw, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.closed:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary (e.g. EMFILE): back off instead of spinning.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			l.logger.Warn("raft listener accept failed", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-l.closed:
				return
			}
			continue
		}
		delay = 0
		select {
		case l.pending <- struct{}{}:
		default:
			l.refused.Note(RefusedBusy, raw.RemoteAddr().String(), fmt.Errorf("%d handshakes in progress", maxPendingHandshakes))
			raw.Close()
			continue
		}
		l.mu.Lock()
		l.inflight[raw] = struct{}{}
		l.mu.Unlock()
		l.wg.Add(1)
		go l.serve(raw)
	}
}

// serve runs the server side of the handshake and hands the connection to
// Accept.
func (l *Layer) serve(raw net.Conn) {
	defer l.wg.Done()
	defer func() { <-l.pending }()
	c, secretID, err := l.handshake(raw, false, 0)
	l.mu.Lock()
	delete(l.inflight, raw)
	l.mu.Unlock()
	if err != nil {
		l.refused.Note(reasonOf(err), raw.RemoteAddr().String(), err)
		raw.Close()
		return
	}
	select {
	case l.ready <- l.track(c, raw, secretID):
	case <-l.closed:
		c.Close()
	}
}

// liveConn is an authenticated connection the layer can cut at shutdown.
type liveConn struct {
	net.Conn
	raw      net.Conn
	secretID string // the secret its proof was made with
	l        *Layer
	once     sync.Once
}

func (c *liveConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.live, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

func (l *Layer) track(c, raw net.Conn, secretID string) net.Conn {
	lc := &liveConn{Conn: c, raw: raw, secretID: secretID, l: l}
	l.mu.Lock()
	l.live[lc] = struct{}{}
	l.mu.Unlock()
	return lc
}

// CloseAll cuts every connection, authenticated or mid-handshake, at the
// TCP level (a TLS close would wait for a writer blocked on an unresponsive
// peer) and refuses further dials, so raft's shutdown need not wait for RPC
// or handshake deadlines.
func (l *Layer) CloseAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	for c := range l.live {
		c.raw.Close()
	}
	for c := range l.inflight {
		c.Close()
	}
}

// errCut: the layer's owner is shutting down.
var errCut = errors.New("store: raft transport shutting down")

// handshake runs TLS and the secret proof on raw within the deadline; it
// returns the id of the secret the proof was made with. A client proves
// with its try-th accepted secret (0: the primary).
func (l *Layer) handshake(raw net.Conn, client bool, try int) (net.Conn, string, error) {
	if err := raw.SetDeadline(time.Now().Add(l.timeout)); err != nil {
		return nil, "", err
	}
	var tc *tls.Conn
	if client {
		tc = tls.Client(raw, l.clientTLS)
	} else {
		tc = tls.Server(raw, l.serverTLS)
	}
	if err := tc.Handshake(); err != nil {
		return nil, "", refuse(RefusedTLS, fmt.Errorf("TLS handshake: %w", err))
	}
	cs := tc.ConnectionState()
	ekm, err := cs.ExportKeyingMaterial(exporterLabel, nil, 32)
	if err != nil {
		return nil, "", refuse(RefusedTLS, fmt.Errorf("TLS exporter: %w", err))
	}
	keys := l.secrets.AcceptedNamed(InfoAuth) // primary first
	if client {
		if try >= len(keys) {
			return nil, "", &refusal{RefusedSecret, errors.New("no other secret to prove with")}
		}
		keys = keys[try:]
	}
	var used string
	if cs.NegotiatedProtocol == alpnV2 {
		used, err = l.proveV2(tc, ekm, client, keys)
	} else if !l.v1Allowed() {
		side := "the client offered no"
		if client {
			side = "the server chose no"
		}
		err = &refusal{RefusedV1, fmt.Errorf("handshake version 1 refused (%s ALPN %s): every member speaks version 2, or --raft-handshake-v1 is refuse", side, alpnV2)}
	} else {
		used, err = l.proveV1(tc, ekm, client, keys)
	}
	if err != nil {
		return nil, "", err
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		return nil, "", err
	}
	return tc, used, nil
}

// proveV1 is version 1's exchange: the client sends HMAC(authKey, "client" |
// exporter); the server, once it holds, HMAC(authKey, "server" | exporter).
func (l *Layer) proveV1(tc *tls.Conn, ekm []byte, client bool, keys []keyring.NamedKEK) (string, error) {
	got := make([]byte, proofLen)
	if client {
		k := keys[0]
		if _, err := tc.Write(proof(k.Key, "client", ekm)); err != nil {
			return "", refuse(RefusedClosed, fmt.Errorf("sending secret proof: %w", err))
		}
		if _, err := io.ReadFull(tc, got); err != nil {
			err = fmt.Errorf("reading secret proof (does the server have the same cluster secret?): %w", err)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return "", refuse(RefusedTimeout, err)
			}
			return "", &refusal{RefusedSecret, err} // a server closes on a proof it does not accept
		}
		if !hmac.Equal(got, proof(k.Key, "server", ekm)) {
			return "", &refusal{RefusedSecret, errors.New("server's proof of the cluster secret is wrong (different cluster secret?)")}
		}
		return k.ID, nil
	}
	if _, err := io.ReadFull(tc, got); err != nil {
		return "", refuse(RefusedClosed, fmt.Errorf("reading secret proof: %w", err))
	}
	for _, k := range keys {
		if hmac.Equal(got, proof(k.Key, "client", ekm)) {
			if _, err := tc.Write(proof(k.Key, "server", ekm)); err != nil {
				return "", refuse(RefusedClosed, fmt.Errorf("sending secret proof: %w", err))
			}
			return k.ID, nil
		}
	}
	return "", &refusal{RefusedSecret, errors.New("client's proof of the cluster secret is wrong (different cluster secret?)")}
}

// proof is version 1's HMAC(authKey, role | exporter).
func proof(authKey []byte, role string, ekm []byte) []byte {
	m := hmac.New(sha256.New, authKey)
	m.Write([]byte(role))
	m.Write(ekm)
	return m.Sum(nil)
}

// localClusterID is this node's cluster id, "" until it has one.
func (l *Layer) localClusterID() string {
	if f := l.clusterID.Load(); f != nil {
		return (*f)()
	}
	return ""
}

// proofV2 is HMAC(authKey, role | exporter | cluster id).
func proofV2(authKey []byte, role string, ekm []byte, cid string) []byte {
	m := hmac.New(sha256.New, authKey)
	m.Write([]byte(role))
	m.Write(ekm)
	m.Write([]byte(cid))
	return m.Sum(nil)
}

// proveV2 exchanges (cluster id, proof) messages: the client sends first,
// with its primary; the server answers only once the client's proof holds
// under a secret it accepts, with that secret. Each side then refuses a
// peer of another cluster. It returns the id of the secret used.
func (l *Layer) proveV2(tc *tls.Conn, ekm []byte, client bool, keys []keyring.NamedKEK) (string, error) {
	mine := l.localClusterID()
	myRole, theirRole := "server", "client"
	if client {
		myRole, theirRole = theirRole, myRole
	}
	send := func(k keyring.NamedKEK) error {
		msg := binary.BigEndian.AppendUint16(nil, uint16(len(mine)))
		msg = append(msg, mine...)
		msg = append(msg, proofV2(k.Key, myRole, ekm, mine)...)
		if _, err := tc.Write(msg); err != nil {
			return refuse(RefusedClosed, fmt.Errorf("sending secret proof: %w", err))
		}
		return nil
	}
	var theirs string
	// receive reads the peer's message and returns the key among keys its
	// proof holds under.
	receive := func(keys []keyring.NamedKEK) (keyring.NamedKEK, error) {
		var n [2]byte
		if _, err := io.ReadFull(tc, n[:]); err != nil {
			err = fmt.Errorf("reading secret proof (does the peer have the same cluster secret?): %w", err)
			if client && !errors.Is(err, os.ErrDeadlineExceeded) {
				return keyring.NamedKEK{}, &refusal{RefusedSecret, err} // a server closes on a proof it does not accept
			}
			return keyring.NamedKEK{}, refuse(RefusedClosed, err)
		}
		size := int(binary.BigEndian.Uint16(n[:]))
		if size > maxWireClusterID {
			return keyring.NamedKEK{}, &refusal{RefusedSecret, fmt.Errorf("peer sent a %d-byte cluster id", size)}
		}
		b := make([]byte, size+proofLen)
		if _, err := io.ReadFull(tc, b); err != nil {
			return keyring.NamedKEK{}, refuse(RefusedClosed, fmt.Errorf("reading secret proof: %w", err))
		}
		theirs = string(b[:size])
		for _, k := range keys {
			if hmac.Equal(b[size:], proofV2(k.Key, theirRole, ekm, theirs)) {
				return k, nil
			}
		}
		return keyring.NamedKEK{}, &refusal{RefusedSecret, fmt.Errorf("%s's proof of the cluster secret is wrong (different cluster secret?)", theirRole)}
	}
	var used keyring.NamedKEK
	if client {
		used = keys[0]
		if err := send(used); err != nil {
			return "", err
		}
		if _, err := receive([]keyring.NamedKEK{used}); err != nil {
			return "", err
		}
	} else {
		var err error
		if used, err = receive(keys); err != nil {
			return "", err
		}
		if err := send(used); err != nil {
			return "", err
		}
	}
	if mine != "" && theirs != "" && mine != theirs {
		return "", &refusal{RefusedClusterID, fmt.Errorf("%s belongs to cluster %s, this node to cluster %s: two clusters share a secret (and an address); refused",
			theirRole, theirs, mine)}
	}
	return used.ID, nil
}

// Accept returns the next authenticated connection.
func (l *Layer) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.closed:
		return nil, errStreamClosed
	}
}

// Close stops accepting; connections already handed out stay open.
func (l *Layer) Close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.closed)
		err = l.ln.Close()
		l.mu.Lock()
		for c := range l.inflight {
			c.Close()
		}
		l.mu.Unlock()
	})
	return err
}

// Wait returns once the accept loop and every handshake have ended.
func (l *Layer) Wait() { l.wg.Wait() }

// Addr is the advertised address (raft uses it as this node's address).
func (l *Layer) Addr() net.Addr { return l.advertise }

// Dial connects to a peer: host names are resolved again on every dial
// (net.Dialer does not cache), then the handshake runs within timeout.
func (l *Layer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	// A peer that refuses the primary's proof may not hold it yet (down
	// while the secret was installed): the other accepted secrets are
	// tried in turn, so it catches up from the log.
	tries := len(l.secrets.AcceptedIDs())
	for try := 0; ; try++ {
		c, err := l.dial(address, timeout, try)
		if err == nil || try+1 >= tries || reasonOf(err) != RefusedSecret {
			return c, err
		}
	}
}

func (l *Layer) dial(address raft.ServerAddress, timeout time.Duration, try int) (net.Conn, error) {
	to := string(address)
	if l.opts.Dial != nil {
		if err := l.opts.Dial(string(l.advertise), to); err != nil {
			return nil, err
		}
	}
	d := net.Dialer{Timeout: timeout}
	raw, err := d.Dial("tcp", to)
	if err != nil {
		return nil, err
	}
	if l.opts.Wrap != nil {
		raw = l.opts.Wrap(string(l.advertise), to, raw)
	}
	l.mu.Lock()
	if l.cut {
		l.mu.Unlock()
		raw.Close()
		return nil, errCut
	}
	l.inflight[raw] = struct{}{}
	l.mu.Unlock()
	c, secretID, err := l.handshake(raw, true, try)
	l.mu.Lock()
	delete(l.inflight, raw)
	cut := l.cut
	l.mu.Unlock()
	if err == nil && cut {
		err = errCut
	}
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("raft connection to %s: %w", to, err)
	}
	return l.track(c, raw, secretID), nil
}
