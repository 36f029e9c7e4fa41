package store

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/store/transport"
)

// TLSFiles name the PEM files of mutual TLS between Raft peers (the
// transport reads them).
type TLSFiles = transport.TLSFiles

// Timing is Raft's failure detection. See LANTiming for what each value does.
type Timing struct {
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout, CommitTimeout time.Duration
}

// LANTiming is the default (Config.Timing zero). The leader heartbeats every
// HeartbeatTimeout/10 = 50 ms; a follower checks every random 500-1000 ms
// whether it heard from the leader within 500 ms, so ten heartbeats in a row
// must be lost before it starts an election (a GC pause or a busy 2-core
// machine does not do that). A dead leader is noticed after 0.5-1.5 s and
// replaced one pre-vote and one vote round trip later; measured p99 1.45 s
// (DESIGN.md). The leader steps down after 250 ms without a quorum, so a
// partitioned old leader stops taking writes before the other side elects
// a new one. hashicorp/raft's defaults (1 s / 1 s / 500 ms) double every
// figure.
func LANTiming() Timing {
	return Timing{
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond,
		CommitTimeout:      50 * time.Millisecond,
	}
}

// FastTiming is for in-process tests on loopback: elections in ~300 ms,
// still tolerant of the race detector on a busy machine.
func FastTiming() Timing {
	return Timing{
		HeartbeatTimeout:   200 * time.Millisecond,
		ElectionTimeout:    200 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
	}
}

// Config configures Open. NodeID, Dir, BindAddr and Secret (or Secrets)
// are required.
type Config struct {
	// NodeID is this node's Raft server id; stable across restarts.
	NodeID string
	// Dir holds raft.db (log and stable store) and snapshots/; created if
	// missing (mode 0700).
	Dir string
	// BindAddr is the TCP address the Raft listener binds, e.g. ":7000" or
	// "127.0.0.1:0".
	BindAddr string
	// Advertise is the host[:port] peers dial. Host names are resolved again
	// on every dial. Empty: BindAddr when it names a specific IP, otherwise
	// Open fails and asks for --advertise. A host without a port gets the
	// bound port.
	Advertise string
	// Secret is the cluster secret (at least keyring.MinClusterSecretLen
	// bytes). It wraps key material in the log and snapshots, and every Raft
	// connection proves knowledge of it (also under TLS).
	Secret []byte
	// Secrets, when set, are the cluster secrets this node holds (Secret is
	// then ignored): while the secret is rotated, the Raft state changes
	// which one is primary (ClusterSecret commands) and Open's store keeps
	// Secrets in step with it.
	Secrets *keyring.Secrets
	// TLS, when set, makes Raft connections mutual TLS with certificates
	// signed by TLS.CAFile (the secret is checked as well).
	TLS *TLSFiles
	// Ring receives the keyring commands the FSM applies; the data path reads
	// it. Nil: Open makes an empty ring with default options.
	Ring *keyring.Ring
	// Timing defaults to LANTiming when zero.
	Timing Timing
	// Commands is the command set the FSM applies and Commands() reports;
	// empty: every command this binary knows (store.Commands). Tests give
	// an older set to act as an older binary in a rolling upgrade.
	Commands CommandSet
	// Logger defaults to slog.Default(). Raft's own log lines go to it with
	// module=raft.
	Logger *slog.Logger
	// Resolve, when set, says where server id is now (a node asks gossip):
	// Raft dials that address instead of the configuration's, which only a
	// leader can update and which a voter that came back on a new address
	// may need to elect one (DESIGN.md, "Addresses"). "" or false: unknown,
	// and the configuration's address is dialled. It is called on every
	// RPC, from Raft's goroutines, so it must be cheap and safe for
	// concurrent use. The peer reached is authenticated as for any dial.
	Resolve func(id string) (addr string, ok bool)
}

// knobs are test-only settings and fault injection, given to Open as
// Options by the package's tests.
type knobs struct {
	snapshotThreshold uint64
	trailingLogs      uint64
	handshakeTimeout  time.Duration // transport.Options.HandshakeTimeout
	transportTimeout  time.Duration
	dial              func(from, to string) error                // before every dial; an error fails it
	wrap              func(from, to string, c net.Conn) net.Conn // every dialed raw connection
	wrapAlso          func(from, to string, c net.Conn) net.Conn // tests: applied after the fault net's wrap
	snapshotFault     func() error                               // before every snapshot file is created or probed; an error fails it
	now               func() time.Time                           // the clock of rate-limited log lines; nil: time.Now
}

// Option changes how Open builds a store. Only this package's tests make
// them (small snapshot thresholds, a network that fails on cue).
type Option func(*knobs)

func (c *Config) check() error {
	var errs []error
	if c.NodeID == "" {
		errs = append(errs, errors.New("NodeID is required"))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("Dir is required"))
	}
	if c.BindAddr == "" {
		errs = append(errs, errors.New("BindAddr is required"))
	} else if _, _, err := net.SplitHostPort(c.BindAddr); err != nil {
		errs = append(errs, fmt.Errorf("BindAddr %q: %v", c.BindAddr, err))
	}
	if c.Secrets == nil && len(c.Secret) < keyring.MinClusterSecretLen {
		errs = append(errs, fmt.Errorf("Secret is %d bytes, need at least %d (the cluster secret is required for Raft)",
			len(c.Secret), keyring.MinClusterSecretLen))
	}
	if c.TLS != nil && (c.TLS.CertFile == "" || c.TLS.KeyFile == "" || c.TLS.CAFile == "") {
		errs = append(errs, errors.New("TLS needs CertFile, KeyFile and CAFile together"))
	}
	if c.Timing == (Timing{}) {
		c.Timing = LANTiming()
	}
	t := c.Timing
	if t.HeartbeatTimeout <= 0 || t.ElectionTimeout <= 0 || t.LeaderLeaseTimeout <= 0 || t.CommitTimeout <= 0 {
		errs = append(errs, fmt.Errorf("Timing %+v: every value must be positive", t))
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("store: config: %w", err)
	}
	return nil
}

// advertiseAddr decides the address peers dial, given the listener's
// actual address (real port after ":0").
func advertiseAddr(bind, advertise string, bound net.Addr) (string, error) {
	tcp, ok := bound.(*net.TCPAddr)
	if !ok {
		return "", fmt.Errorf("listener address %v is not TCP", bound)
	}
	port := strconv.Itoa(tcp.Port)
	if advertise == "" {
		host, _, _ := net.SplitHostPort(bind)
		ip := net.ParseIP(host)
		if ip == nil || ip.IsUnspecified() {
			return "", fmt.Errorf("bind address %q has no specific IP that peers could dial: set --advertise to this node's reachable host or IP", bind)
		}
		return net.JoinHostPort(ip.String(), port), nil
	}
	host, p, err := net.SplitHostPort(advertise)
	if err != nil { // no port: keep the bound one
		host, p = advertise, port
		if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
			host = host[1 : len(host)-1]
		}
	}
	if host == "" {
		return "", fmt.Errorf("advertise address %q has no host", advertise)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return "", fmt.Errorf("advertise address %q is unspecified: peers cannot dial it", advertise)
	}
	if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
		return "", fmt.Errorf("advertise address %q: bad port %q", advertise, p)
	}
	return net.JoinHostPort(host, p), nil
}
