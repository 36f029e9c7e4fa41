package cluster

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tether-proxy/tether/internal/logging"
)

// Gossip streams before they prove the key. memberlist reads a TCP stream's
// first frame whole (up to 20 MiB) before it decrypts it, for as long as its
// TCP timeout: anyone who reaches the gossip port could make a node buffer
// 20 MiB per connection. The guard sits between memberlist's transport and
// memberlist: it reads each incoming stream's first frame itself, within
// bounds, and hands memberlist only streams whose frame decrypts with a key
// of the keyring (a peer that holds the cluster secret); the others are
// closed and counted. A frame is memberlist's encrypted message:
//
//	encryptMsg (1 byte, 10) | length (uint32) | version (0 or 1) | nonce (12) | AES-GCM ciphertext and tag
//
// with the type and length bytes as additional data (no label: tether sets
// none), the format memberlist's own streams use when a key is set.
const (
	// maxPreAuthFrame is the largest first frame a stream may announce:
	// far above any state a member sends (node metas of 512 bytes and the
	// health verdicts of every destination), far below memberlist's 20 MiB.
	maxPreAuthFrame = 8 << 20
	// maxPreAuthStreams and maxPreAuthPerSource bound the streams being
	// read before they proved the key, in all and from one IP address.
	maxPreAuthStreams   = 64
	maxPreAuthPerSource = 8
	// maxPreAuthBytes and maxPreAuthSourceBytes bound the bytes those
	// streams announced in frames larger than smallFrame, in all and from
	// one IP. Small frames (what members send but for a large cluster's
	// push/pull) only take a stream slot, so streams that fill the byte
	// budget do not hold back a member's join or push/pull: the most the
	// guard holds is maxPreAuthBytes + maxPreAuthStreams × smallFrame.
	maxPreAuthBytes       = 32 << 20
	maxPreAuthSourceBytes = 8 << 20
	smallFrame            = 64 << 10
	// preAuthTimeout bounds the time to send the first frame.
	preAuthTimeout = 5 * time.Second
	// guardLogEvery: a refused stream is logged at most once per reason
	// in this time, the next line saying how many were held back.
	guardLogEvery = 30 * time.Second
)

// Reasons a gossip stream is refused before memberlist reads it
// (Membership.StreamsRefused, metric tether_gossip_streams_refused_total).
const (
	StreamBusy      = "busy"      // too many streams (or bytes) waiting to prove the key, from its source or in all
	StreamTooLarge  = "too_large" // it announced a first frame over maxPreAuthFrame
	StreamPlain     = "plain"     // not an encrypted frame (no key, another protocol)
	StreamMalformed = "malformed" // a frame too short to be encrypted, or of an unknown version
	StreamWrongKey  = "wrong_key" // the frame does not decrypt with any key of the keyring
	StreamTimeout   = "timeout"   // the frame did not arrive within preAuthTimeout
	StreamClosed    = "closed"    // the peer closed before its frame was whole
)

const encryptMsg = 10 // memberlist's messageType of an encrypted frame

// guardedTransport is memberlist's transport with the guard on its streams.
type guardedTransport struct {
	memberlist.NodeAwareTransport
	keyring *memberlist.Keyring
	log     *slog.Logger
	timeout time.Duration
	streams chan net.Conn
	stop    chan struct{}
	down    chan struct{} // the transport under the guard is shut down
	once    sync.Once
	wg      sync.WaitGroup

	mu       sync.Mutex
	reading  map[net.Conn]struct{} // closed by Shutdown
	inFlight int
	bytes    int
	bySource map[string]*sourceUse
	refused  *logging.Refusals
}

type sourceUse struct{ streams, bytes int }

var _ memberlist.NodeAwareTransport = (*guardedTransport)(nil)

func newGuardedTransport(inner memberlist.NodeAwareTransport, kr *memberlist.Keyring, timeout time.Duration, lg *slog.Logger) *guardedTransport {
	g := &guardedTransport{
		NodeAwareTransport: inner, keyring: kr, log: lg, timeout: min(timeout, preAuthTimeout),
		streams: make(chan net.Conn), stop: make(chan struct{}), down: make(chan struct{}),
		bySource: map[string]*sourceUse{}, reading: map[net.Conn]struct{}{}, refused: newRefusals(lg),
	}
	g.wg.Add(1)
	go g.accept()
	return g
}

// StreamCh hands memberlist the streams that proved the key.
func (g *guardedTransport) StreamCh() <-chan net.Conn { return g.streams }

// Shutdown stops the guard and the transport under it.
func (g *guardedTransport) Shutdown() error {
	var err error
	g.once.Do(func() {
		close(g.stop)
		g.mu.Lock()
		for c := range g.reading {
			c.Close()
		}
		g.mu.Unlock()
		err = g.NodeAwareTransport.Shutdown()
		close(g.down)
	})
	g.wg.Wait()
	return err
}

func (g *guardedTransport) accept() {
	defer g.wg.Done()
	in := g.NodeAwareTransport.StreamCh()
	for {
		select {
		case <-g.down:
			return
		case c := <-in:
			select {
			case <-g.stop:
				// Drained until the transport is down: its listener
				// blocks handing over a stream nobody takes.
				c.Close()
				continue
			default:
			}
			src := sourceOf(c)
			if !g.admit(c, src) {
				g.refuse(c, StreamBusy, src, fmt.Errorf("%d streams waiting to prove the key (%d from %s)", maxPreAuthStreams, maxPreAuthPerSource, src))
				continue
			}
			g.wg.Add(1)
			go g.check(c, src)
		}
	}
}

func sourceOf(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

// admit takes a stream slot for c from src.
func (g *guardedTransport) admit(c net.Conn, src string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	u := g.bySource[src]
	if g.inFlight >= maxPreAuthStreams || (u != nil && u.streams >= maxPreAuthPerSource) {
		return false
	}
	select {
	case <-g.stop:
		return false
	default:
	}
	g.reading[c] = struct{}{}
	if u == nil {
		u = &sourceUse{}
		g.bySource[src] = u
	}
	u.streams++
	g.inFlight++
	return true
}

// reserve takes n bytes of src's and the total budget (nothing for a
// small frame); it returns what it took.
func (g *guardedTransport) reserve(src string, n int) (int, bool) {
	if n <= smallFrame {
		return 0, true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	u := g.bySource[src]
	if g.bytes+n > maxPreAuthBytes || u.bytes+n > maxPreAuthSourceBytes {
		return 0, false
	}
	u.bytes += n
	g.bytes += n
	return n, true
}

// release gives back c's stream slot from src and n reserved bytes.
func (g *guardedTransport) release(c net.Conn, src string, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.reading, c)
	u := g.bySource[src]
	u.streams--
	u.bytes -= n
	g.inFlight--
	g.bytes -= n
	if u.streams == 0 {
		delete(g.bySource, src)
	}
}

// check reads c's first frame within the bounds and hands c to memberlist
// when it decrypts. A stream that is not encrypted, or whose whole frame
// does not decrypt, is handed over too (its frame already read, within the
// bounds): memberlist answers it with its error, which tells the peer that
// the cluster secret differs; its slot and bytes stay taken until
// memberlist closes it.
func (g *guardedTransport) check(c net.Conn, src string) {
	defer g.wg.Done()
	reserved := 0
	frame, reason, err := g.readFrame(c, src, &reserved)
	again, ok := 0, reason == StreamPlain
	if reason == StreamWrongKey {
		// memberlist copies the frame while this one is held.
		again, ok = g.reserve(src, len(frame)-5)
	}
	switch {
	case err == nil:
		g.release(c, src, reserved)
	case ok:
		g.refused.Note(reason, src, err)
		reserved += again
		raw := c
		c = &releaseConn{Conn: raw, release: func() { g.release(raw, src, reserved) }}
	default:
		g.release(c, src, reserved)
		g.refuse(c, reason, src, err)
		return
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		c.Close()
		return
	}
	rc := &replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(frame), c)}
	select {
	case g.streams <- rc:
	case <-g.stop:
		c.Close()
	}
}

// releaseConn gives back the guard's hold on a stream once memberlist
// closes it.
type releaseConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *releaseConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// readFrame reads and authenticates the first frame; it returns the bytes
// read (to replay to memberlist) or why the stream is refused.
func (g *guardedTransport) readFrame(c net.Conn, src string, reserved *int) ([]byte, string, error) {
	if err := c.SetReadDeadline(time.Now().Add(g.timeout)); err != nil {
		return nil, StreamClosed, err
	}
	var hdr [5]byte
	if _, err := io.ReadFull(c, hdr[:1]); err != nil {
		return nil, readReason(err), fmt.Errorf("reading the message type: %w", err)
	}
	if hdr[0] != encryptMsg {
		return hdr[:1], StreamPlain, fmt.Errorf("message type %d, not an encrypted frame: the peer has no gossip key (or speaks another protocol)", hdr[0])
	}
	if _, err := io.ReadFull(c, hdr[1:]); err != nil {
		return nil, readReason(err), fmt.Errorf("reading the frame length: %w", err)
	}
	n := int(binary.BigEndian.Uint32(hdr[1:]))
	switch {
	case n > maxPreAuthFrame:
		return nil, StreamTooLarge, fmt.Errorf("it announces a %d-byte frame, at most %d before it proves the key", n, maxPreAuthFrame)
	case n < 1+12+16:
		return nil, StreamMalformed, fmt.Errorf("a %d-byte encrypted frame is too short", n)
	}
	took, ok := g.reserve(src, n)
	if !ok {
		return nil, StreamBusy, fmt.Errorf("%d bytes announced while %d bytes wait to prove the key (at most %d, %d from one address)", n, g.waiting(), maxPreAuthBytes, maxPreAuthSourceBytes)
	}
	*reserved = took
	// Memory follows what arrives, not what was announced: the first 64
	// KiB, then the whole frame once that much came.
	frame := append(make([]byte, 0, min(n+5, 64<<10)), hdr[:]...)
	for len(frame) < n+5 {
		if len(frame) == cap(frame) {
			frame = append(make([]byte, 0, n+5), frame...)
		}
		k, err := c.Read(frame[len(frame):min(cap(frame), n+5)])
		frame = frame[:len(frame)+k]
		if err != nil && len(frame) < n+5 {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, readReason(err), fmt.Errorf("reading a %d-byte frame (%d arrived): %w", n, len(frame)-5, err)
		}
	}
	if reason, err := g.verify(frame[:5], frame[5:]); err != nil {
		return frame, reason, err
	}
	return frame, "", nil
}

func (g *guardedTransport) streamsWaiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight
}

func (g *guardedTransport) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.bytes
}

// verify opens msg (version | nonce | ciphertext) with each key of the
// keyring, the header as additional data.
func (g *guardedTransport) verify(header, msg []byte) (string, error) {
	if msg[0] > 1 {
		return StreamMalformed, fmt.Errorf("encryption version %d is unknown", msg[0])
	}
	for _, key := range g.keyring.GetKeys() {
		block, err := aes.NewCipher(key)
		if err != nil {
			continue
		}
		gcm, err := cipher.NewGCM(block)
		if err != nil {
			continue
		}
		if _, err := gcm.Open(nil, msg[1:13], msg[13:], header); err == nil {
			return "", nil
		}
	}
	return StreamWrongKey, errors.New("the frame does not decrypt with any key of the keyring: the peer has another cluster secret")
}

func readReason(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return StreamTimeout
	}
	return StreamClosed
}

// refuse closes c and counts it.
func (g *guardedTransport) refuse(c net.Conn, reason, src string, err error) {
	c.Close()
	g.refused.Note(reason, src, err)
}

// newRefusals counts refused streams and logs them at most once per
// reason per guardLogEvery.
func newRefusals(lg *slog.Logger) *logging.Refusals {
	return logging.NewRefusals(lg, "gossip stream refused before it proved the cluster secret (logged once per reason every 30s; tether_gossip_streams_refused_total counts them all)", guardLogEvery, time.Now)
}

// refusedCounts is how many streams were refused, by reason.
func (g *guardedTransport) refusedCounts() map[string]uint64 { return g.refused.Counts() }

// replayConn reads the bytes the guard read first, then the connection.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(b []byte) (int, error) { return c.r.Read(b) }
