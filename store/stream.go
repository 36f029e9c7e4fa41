package store

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
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

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

const (
	infoTransportAuth = "tether raft transport v1" // DeriveKEK info of authKey
	exporterLabel     = "EXPORTER-tether-raft-auth-v1"
	alpnV2            = "tether-raft-2" // the handshake with cluster ids
	maxWireClusterID  = 1024
	proofLen          = sha256.Size
	// maxPendingHandshakes bounds concurrent handshakes; connections beyond
	// it are closed at once rather than queued.
	maxPendingHandshakes = 256
)

var errStreamClosed = errors.New("store: raft stream layer closed")

// streamLayer is a raft.StreamLayer over TCP with the handshake above.
// Accept only returns authenticated connections; handshakes run in their
// own goroutines with a deadline, so a stalled peer never blocks Accept.
type streamLayer struct {
	ln        net.Listener
	advertise advertised
	serverTLS *tls.Config
	clientTLS *tls.Config
	authKey   []byte
	clusterID atomic.Pointer[func() string] // this node's cluster id ("" until known)
	timeout   time.Duration
	knobs     *knobs
	logger    *slog.Logger

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

var _ raft.StreamLayer = (*streamLayer)(nil)

// advertised is a net.Addr that may hold a host name.
type advertised string

func (a advertised) Network() string { return "tcp" }
func (a advertised) String() string  { return string(a) }

func newStreamLayer(ln net.Listener, advertise string, secret []byte, files *TLSFiles, k *knobs, logger *slog.Logger) (*streamLayer, error) {
	authKey, err := keyring.DeriveKEK(secret, infoTransportAuth)
	if err != nil {
		return nil, err
	}
	serverTLS, clientTLS, err := transportTLS(files, logger)
	if err != nil {
		return nil, err
	}
	timeout := k.handshakeTimeout
	if timeout <= 0 {
		timeout = defaultHandshakeTimeout
	}
	l := &streamLayer{
		ln: ln, advertise: advertised(advertise), serverTLS: serverTLS, clientTLS: clientTLS,
		authKey: authKey, timeout: timeout, knobs: k, logger: logger,
		ready:    make(chan net.Conn),
		pending:  make(chan struct{}, maxPendingHandshakes),
		closed:   make(chan struct{}),
		inflight: map[net.Conn]struct{}{},
		live:     map[*liveConn]struct{}{},
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
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

func (l *streamLayer) acceptLoop() {
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
			l.logger.Warn("raft connection dropped: too many handshakes in progress", "remote", raw.RemoteAddr().String())
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
func (l *streamLayer) serve(raw net.Conn) {
	defer l.wg.Done()
	defer func() { <-l.pending }()
	c, err := l.handshake(raw, false)
	l.mu.Lock()
	delete(l.inflight, raw)
	l.mu.Unlock()
	if err != nil {
		l.logger.Warn("raft connection refused", "remote", raw.RemoteAddr().String(), "err", err)
		raw.Close()
		return
	}
	select {
	case l.ready <- l.track(c, raw):
	case <-l.closed:
		c.Close()
	}
}

// liveConn is an authenticated connection the layer can cut at shutdown.
type liveConn struct {
	net.Conn
	raw  net.Conn
	l    *streamLayer
	once sync.Once
}

func (c *liveConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.live, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

func (l *streamLayer) track(c, raw net.Conn) net.Conn {
	lc := &liveConn{Conn: c, raw: raw, l: l}
	l.mu.Lock()
	l.live[lc] = struct{}{}
	l.mu.Unlock()
	return lc
}

// closeAll cuts every connection, authenticated or mid-handshake, at the
// TCP level (a TLS close would wait for a writer blocked on an unresponsive
// peer) and refuses further dials, so raft's shutdown need not wait for RPC
// or handshake deadlines.
func (l *streamLayer) closeAll() {
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

// errCut: the store is shutting down.
var errCut = errors.New("store: raft transport shutting down")

// handshake runs TLS and the secret proof on raw within the deadline.
func (l *streamLayer) handshake(raw net.Conn, client bool) (net.Conn, error) {
	if err := raw.SetDeadline(time.Now().Add(l.timeout)); err != nil {
		return nil, err
	}
	var tc *tls.Conn
	if client {
		tc = tls.Client(raw, l.clientTLS)
	} else {
		tc = tls.Server(raw, l.serverTLS)
	}
	if err := tc.Handshake(); err != nil {
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	cs := tc.ConnectionState()
	ekm, err := cs.ExportKeyingMaterial(exporterLabel, nil, 32)
	if err != nil {
		return nil, fmt.Errorf("TLS exporter: %w", err)
	}
	if cs.NegotiatedProtocol == alpnV2 {
		if err := l.proveV2(tc, ekm, client); err != nil {
			return nil, err
		}
		if err := raw.SetDeadline(time.Time{}); err != nil {
			return nil, err
		}
		return tc, nil
	}
	mine, theirs := l.proof("server", ekm), l.proof("client", ekm)
	if client {
		mine, theirs = theirs, mine
	}
	got := make([]byte, proofLen)
	if client {
		if _, err := tc.Write(mine); err != nil {
			return nil, fmt.Errorf("sending secret proof: %w", err)
		}
		if _, err := io.ReadFull(tc, got); err != nil {
			return nil, fmt.Errorf("reading secret proof (does the server have the same cluster secret?): %w", err)
		}
		if !hmac.Equal(got, theirs) {
			return nil, errors.New("server's proof of the cluster secret is wrong (different cluster secret?)")
		}
	} else {
		if _, err := io.ReadFull(tc, got); err != nil {
			return nil, fmt.Errorf("reading secret proof: %w", err)
		}
		if !hmac.Equal(got, theirs) {
			return nil, errors.New("client's proof of the cluster secret is wrong (different cluster secret?)")
		}
		if _, err := tc.Write(mine); err != nil {
			return nil, fmt.Errorf("sending secret proof: %w", err)
		}
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return tc, nil
}

func (l *streamLayer) proof(role string, ekm []byte) []byte {
	m := hmac.New(sha256.New, l.authKey)
	m.Write([]byte(role))
	m.Write(ekm)
	return m.Sum(nil)
}

// localClusterID is this node's cluster id, "" until it has one.
func (l *streamLayer) localClusterID() string {
	if f := l.clusterID.Load(); f != nil {
		return (*f)()
	}
	return ""
}

// proofV2 is HMAC(authKey, role | exporter | cluster id).
func (l *streamLayer) proofV2(role string, ekm []byte, cid string) []byte {
	m := hmac.New(sha256.New, l.authKey)
	m.Write([]byte(role))
	m.Write(ekm)
	m.Write([]byte(cid))
	return m.Sum(nil)
}

// proveV2 exchanges (cluster id, proof) messages: the client sends first;
// the server answers only once the client's proof holds. Each side then
// refuses a peer of another cluster.
func (l *streamLayer) proveV2(tc *tls.Conn, ekm []byte, client bool) error {
	mine := l.localClusterID()
	myRole, theirRole := "server", "client"
	if client {
		myRole, theirRole = theirRole, myRole
	}
	send := func() error {
		msg := binary.BigEndian.AppendUint16(nil, uint16(len(mine)))
		msg = append(msg, mine...)
		msg = append(msg, l.proofV2(myRole, ekm, mine)...)
		if _, err := tc.Write(msg); err != nil {
			return fmt.Errorf("sending secret proof: %w", err)
		}
		return nil
	}
	var theirs string
	receive := func() error {
		var n [2]byte
		if _, err := io.ReadFull(tc, n[:]); err != nil {
			return fmt.Errorf("reading secret proof (does the peer have the same cluster secret?): %w", err)
		}
		size := int(binary.BigEndian.Uint16(n[:]))
		if size > maxWireClusterID {
			return fmt.Errorf("peer sent a %d-byte cluster id", size)
		}
		b := make([]byte, size+proofLen)
		if _, err := io.ReadFull(tc, b); err != nil {
			return fmt.Errorf("reading secret proof: %w", err)
		}
		theirs = string(b[:size])
		if !hmac.Equal(b[size:], l.proofV2(theirRole, ekm, theirs)) {
			return fmt.Errorf("%s's proof of the cluster secret is wrong (different cluster secret?)", theirRole)
		}
		return nil
	}
	if client {
		if err := send(); err != nil {
			return err
		}
		if err := receive(); err != nil {
			return err
		}
	} else {
		if err := receive(); err != nil {
			return err
		}
		if err := send(); err != nil {
			return err
		}
	}
	if mine != "" && theirs != "" && mine != theirs {
		return fmt.Errorf("%s belongs to cluster %s, this node to cluster %s: two clusters share a secret (and an address); refused",
			theirRole, theirs, mine)
	}
	return nil
}

// Accept returns the next authenticated connection.
func (l *streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.closed:
		return nil, errStreamClosed
	}
}

// Close stops accepting; connections already handed out stay open.
func (l *streamLayer) Close() error {
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

// wait returns once the accept loop and every handshake have ended.
func (l *streamLayer) wait() { l.wg.Wait() }

// Addr is the advertised address (raft uses it as this node's address).
func (l *streamLayer) Addr() net.Addr { return l.advertise }

// Dial connects to a peer: host names are resolved again on every dial
// (net.Dialer does not cache), then the handshake runs within timeout.
func (l *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	to := string(address)
	if l.knobs.dial != nil {
		if err := l.knobs.dial(string(l.advertise), to); err != nil {
			return nil, err
		}
	}
	d := net.Dialer{Timeout: timeout}
	raw, err := d.Dial("tcp", to)
	if err != nil {
		return nil, err
	}
	if l.knobs.wrap != nil {
		raw = l.knobs.wrap(string(l.advertise), to, raw)
	}
	l.mu.Lock()
	if l.cut {
		l.mu.Unlock()
		raw.Close()
		return nil, errCut
	}
	l.inflight[raw] = struct{}{}
	l.mu.Unlock()
	c, err := l.handshake(raw, true)
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
	return l.track(c, raw), nil
}
