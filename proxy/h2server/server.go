package h2server

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-proxy/tether/proxy/internal/cancelhook"
	"github.com/tether-proxy/tether/proxy/internal/h1wire"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

const (
	defaultMaxStreams = 250 // net/http's
	// The windows this server grants: net/http's defaults.
	connWindow   = 1 << 20
	streamWindow = 1 << 20
	// initialPeerWindow is the protocol's initial window, before SETTINGS.
	initialPeerWindow = 65535
	prefaceTimeout    = 10 * time.Second
	maxFrameSize      = 16 << 10
	// writeBufSize bounds what the connection's write buffer holds before
	// it writes; a response body is sent in DATA frames of at most this.
	writeBufSize = 16 << 10
	// respBufSize is what a response buffers before it sends its headers.
	respBufSize = 8 << 10
)

// Server serves the HTTP/2 connections of one http.Server.
type Server struct {
	srv        *http.Server
	maxStreams uint32
	maxHeader  uint32
	idle       time.Duration

	mu       sync.Mutex
	conns    map[*conn]struct{}
	shutdown bool
}

// New makes s the HTTP/2 server of srv: it takes srv's h2 and h2c
// connections (srv.TLSNextProto) and its shutdown (a GOAWAY on every
// connection, RegisterOnShutdown). MaxConcurrentStreams is srv.HTTP2's, else
// net/http's default; the header list limit is srv.MaxHeaderBytes as
// net/http's HTTP/2 server counts it.
func New(srv *http.Server) *Server {
	s := &Server{srv: srv, maxStreams: defaultMaxStreams, idle: srv.IdleTimeout, conns: map[*conn]struct{}{}}
	if srv.HTTP2 != nil && srv.HTTP2.MaxConcurrentStreams > 0 {
		s.maxStreams = uint32(srv.HTTP2.MaxConcurrentStreams)
	}
	n := srv.MaxHeaderBytes
	if n <= 0 {
		n = http.DefaultMaxHeaderBytes
	}
	s.maxHeader = uint32(n + 10*32) // as net/http's HTTP/2 server pads it
	if s.idle <= 0 {
		s.idle = srv.ReadTimeout
	}
	if srv.TLSNextProto == nil {
		srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	srv.TLSNextProto["h2"] = func(hs *http.Server, c *tls.Conn, _ http.Handler) {
		st := c.ConnectionState()
		s.serveConn(c, c, &st, false)
	}
	srv.TLSNextProto["unencrypted_http2"] = func(hs *http.Server, c *tls.Conn, _ http.Handler) {
		u, ok := c.NetConn().(interface{ UnencryptedNetConn() net.Conn })
		if !ok {
			_ = c.Close()
			return
		}
		nc := u.UnencryptedNetConn()
		s.serveConn(nc, nc, nil, true) // net/http read the preface
	}
	srv.RegisterOnShutdown(s.goAwayAll)
	return s
}

// ServeConn serves one HTTP/2 connection whose client preface is still to
// be read; tlsState is its TLS state (nil for h2c). It returns when the
// connection is closed and its handlers have returned.
func (s *Server) ServeConn(nc net.Conn, tlsState *tls.ConnectionState) {
	s.serveConn(nc, nc, tlsState, false)
}

func (s *Server) goAwayAll() {
	s.mu.Lock()
	s.shutdown = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.goAway(http2.ErrCodeNo)
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.srv.ErrorLog != nil {
		s.srv.ErrorLog.Printf(format, args...)
	}
}

// conn is one client connection.
type conn struct {
	s        *Server
	nc       net.Conn
	hookConn net.Conn // what the http.Server's ConnState hook is given
	tlsState *tls.ConnectionState
	handler  http.Handler
	ctx      context.Context // every stream's context values; never cancelled
	remote   string
	br       *bufio.Reader
	fr       *http2.Framer
	hd       *blockDecoder // the read loop's

	// Everything below is guarded by mu; the frame writes too.
	mu sync.Mutex
	// out holds the frames written and not yet sent; one goroutine at a
	// time (writing) sends it, outside mu, and sends as well what others
	// add meanwhile, so the frames of streams finishing together leave in
	// one write.
	out     []byte
	spare   []byte
	writing bool
	// writeBound: a stream\'s write deadline passed during a socket
	// write, which was given a second more (SetWriteDeadline).
	writeBound  bool
	outRoom     sync.Cond // waits for out to fall under outLimit
	henc        *hpack.Encoder
	hbuf        []byte // encodeBuf's bytes
	streams     map[uint32]*stream
	maxClientID uint32
	sendWindow  int64 // the client's window for this connection
	recvUnsent  int   // connection window consumed, not yet given back
	peerWindow  int32 // the client's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame   uint32
	running     int // handlers running
	queued      []*stream
	goingAway   bool
	closed      bool
	writeErr    error
	idleArmed   bool
	handlers    sync.WaitGroup
	headerKey   map[string]string // canonical request field names, this connection's
	// scratch holds containers of streams whose handlers have returned,
	// for the next streams (at most maxScratch).
	scratch []*streamScratch
	// lenN's text, the last Content-Length the server added: responses
	// of one size repeat.
	lenN    int
	lenText string
}

// lengthText is n's decimal text.
func (c *conn) lengthText(n int) string {
	if c.lenText == "" || c.lenN != n {
		c.lenN, c.lenText = n, strconv.Itoa(n)
	}
	return c.lenText
}

type encodeBuf struct{ c *conn }

func (e encodeBuf) Write(p []byte) (int, error) {
	e.c.hbuf = append(e.c.hbuf, p...)
	return len(p), nil
}

func (s *Server) serveConn(nc, hookConn net.Conn, tlsState *tls.ConnectionState, prefaceRead bool) {
	c := &conn{s: s, nc: nc, hookConn: hookConn, tlsState: tlsState, handler: s.srv.Handler,
		streams: map[uint32]*stream{}, sendWindow: initialPeerWindow, peerWindow: initialPeerWindow, peerFrame: maxFrameSize}
	if c.handler == nil {
		c.handler = http.DefaultServeMux
	}
	c.remote = nc.RemoteAddr().String()
	base := context.WithValue(context.Background(), http.ServerContextKey, s.srv)
	base = context.WithValue(base, http.LocalAddrContextKey, nc.LocalAddr())
	c.ctx = base
	c.br = bufio.NewReaderSize(nc, 4<<10) // larger frames are read past it
	c.outRoom.L = &c.mu
	c.fr = http2.NewFramer(outBuf{c}, c.br)
	c.fr.SetReuseFrames()
	c.hd = newBlockDecoder(s.maxHeader)
	c.fr.SetMaxReadFrameSize(maxFrameSize)
	c.henc = hpack.NewEncoder(encodeBuf{c})

	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()

	c.mu.Lock()
	_ = c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: maxFrameSize},
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: s.maxStreams},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: s.maxHeader},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow},
	)
	_ = c.fr.WriteWindowUpdate(0, connWindow-initialPeerWindow)
	c.flushLocked()
	c.mu.Unlock()

	if !prefaceRead {
		// The header timeout bounds the wait for the preface, as the
		// listener bounds it for net/http's server.
		wait := prefaceTimeout
		if d := s.srv.ReadHeaderTimeout; d > 0 {
			wait = d
		}
		_ = nc.SetReadDeadline(time.Now().Add(wait))
		var buf [len(http2.ClientPreface)]byte
		if _, err := io.ReadFull(c.br, buf[:]); err != nil || string(buf[:]) != http2.ClientPreface {
			c.close()
			return
		}
		_ = nc.SetReadDeadline(time.Time{})
	}
	if h := s.srv.ConnState; h != nil {
		h(hookConn, http.StateActive)
	}
	c.serve()
}

// serve is the connection's read loop.
func (c *conn) serve() {
	defer c.close()
	for {
		if c.br.Buffered() == 0 {
			c.mu.Lock()
			c.flushAsyncLocked()
			c.armIdleLocked()
			closed, done := c.closed, c.goingAway && len(c.streams) == 0
			c.mu.Unlock()
			if closed {
				return
			}
			if done {
				c.drain()
				return
			}
		}
		f, err := c.readFrame()
		if err != nil {
			var se http2.StreamError
			var ce http2.ConnectionError
			switch {
			case errors.As(err, &se):
				c.mu.Lock()
				c.resetLocked(se.StreamID, se.Code)
				c.mu.Unlock()
				continue
			case errors.As(err, &ce):
				c.fail(http2.ErrCode(ce))
				c.drain()
			case errors.Is(err, http2.ErrFrameTooLarge):
				c.fail(http2.ErrCodeFrameSize)
				c.drain()
			case isTimeout(err):
				c.mu.Lock()
				idle, goingAway := len(c.streams) == 0, c.goingAway
				c.mu.Unlock()
				switch {
				case goingAway:
					c.drain()
				case idle:
					c.goAway(http2.ErrCodeNo)
					c.drain()
				}
			}
			return
		}
		if code, ok := c.process(f); !ok {
			c.fail(code)
			c.drain()
			return
		}
	}
}

// readFrame reads the next frame; a header block is read whole and
// decoded (*headerBlock).
func (c *conn) readFrame() (any, error) {
	if blk, ok, err := c.readHeaders(); ok {
		return blk, err
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		return nil, err
	}
	if hf, ok := f.(*http2.HeadersFrame); ok {
		return c.hd.read(c.fr, hf)
	}
	return f, nil
}

// readHeaders reads and decodes a HEADERS frame that is a header block
// whole (END_HEADERS) and fits in the read buffer, from the buffer, where
// the Framer would allocate the frame; ok is false, with nothing read,
// for any other frame, or one the Framer must judge (stream 0, a padding
// or priority field longer than the frame), and on a read error, which
// the Framer then meets and reports.
func (c *conn) readHeaders() (blk *headerBlock, ok bool, err error) {
	const hlen = 9
	b, err := c.br.Peek(hlen)
	if err != nil || http2.FrameType(b[3]) != http2.FrameHeaders {
		return nil, false, nil
	}
	n := int(b[0])<<16 | int(b[1])<<8 | int(b[2])
	flags := http2.Flags(b[4])
	id := binary.BigEndian.Uint32(b[5:]) & (1<<31 - 1)
	if id == 0 || !flags.Has(http2.FlagHeadersEndHeaders) || n > maxFrameSize || hlen+n > c.br.Size() {
		return nil, false, nil
	}
	if b, err = c.br.Peek(hlen + n); err != nil {
		return nil, false, nil
	}
	p := b[hlen:]
	pad := 0
	if flags.Has(http2.FlagHeadersPadded) {
		if len(p) < 1 {
			return nil, false, nil
		}
		pad, p = int(p[0]), p[1:]
	}
	var prio http2.PriorityParam
	if flags.Has(http2.FlagHeadersPriority) {
		if len(p) < 5 {
			return nil, false, nil
		}
		v := binary.BigEndian.Uint32(p)
		prio.StreamDep = v & (1<<31 - 1)
		prio.Exclusive = prio.StreamDep != v
		prio.Weight = p[4]
		p = p[5:]
	}
	if pad > len(p) {
		return nil, false, nil
	}
	c.hd.start(id, flags.Has(http2.FlagHeadersEndStream), flags.Has(http2.FlagHeadersPriority), prio)
	blk, err = c.hd.decode(c.fr, p[:len(p)-pad], true)
	_, _ = c.br.Discard(hlen + n)
	return blk, true, err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// armIdleLocked bounds the wait for the next frame by the idle timeout
// while no stream is open, and lifts the bound while one is.
func (c *conn) armIdleLocked() {
	if c.s.idle <= 0 {
		return
	}
	if len(c.streams) == 0 {
		c.idleArmed = true
		_ = c.nc.SetReadDeadline(time.Now().Add(c.s.idle))
	} else if c.idleArmed {
		c.idleArmed = false
		_ = c.nc.SetReadDeadline(time.Time{})
	}
}

// fail ends the connection with a GOAWAY carrying code.
func (c *conn) fail(code http2.ErrCode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.goingAway = true
		_ = c.fr.WriteGoAway(c.maxClientID, code, nil)
		c.flushLocked()
	}
}

// drain ends the connection after a GOAWAY: what is buffered is sent, the
// write side closed, and what the client still sends read and dropped, for
// a second at most. Closing with unread bytes would reset the connection,
// and the client could lose the GOAWAY and the last responses.
func (c *conn) drain() {
	c.mu.Lock()
	c.sentLocked()
	c.mu.Unlock()
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.Copy(io.Discard, io.LimitReader(c.br, 1<<20))
}

// goAway starts a graceful close: no new stream is taken, those in flight
// finish; an idle connection is drained and closed at once.
func (c *conn) goAway(code http2.ErrCode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.goingAway || c.closed {
		return
	}
	c.goingAway = true
	_ = c.fr.WriteGoAway(c.maxClientID, code, nil)
	c.flushLocked()
	if len(c.streams) == 0 {
		_ = c.nc.SetReadDeadline(time.Now()) // the read loop drains and closes
	}
}

// close ends the connection: every stream's handler is cancelled and
// woken, and close returns when they have returned.
func (c *conn) close() {
	c.mu.Lock()
	c.closed = true
	if c.writeErr == nil {
		c.writeErr = net.ErrClosed
	}
	c.outRoom.Broadcast()
	for _, st := range c.streams {
		st.closeLocked(errClientGone)
	}
	c.queued = nil
	c.mu.Unlock()
	_ = c.nc.Close()
	c.handlers.Wait()
}

var errClientGone = errors.New("h2server: client disconnected")

type outBuf struct{ c *conn }

func (o outBuf) Write(p []byte) (int, error) { o.c.out = append(o.c.out, p...); return len(p), nil }

// outLimit bounds out: a writer past it waits for the socket. A buffer
// larger than keepOut is not kept for the next write.
const (
	outLimit = 64 << 10
	keepOut  = 32 << 10
)

// flushLocked sends what out holds, unless another goroutine is sending,
// which then sends it too. It lets go of mu while it writes: what a caller
// saw before may have changed when it returns.
func (c *conn) flushLocked() {
	if c.writing {
		return
	}
	if len(c.out) > 0 && c.running > 1 && c.writeErr == nil {
		// Other handlers of the connection may be about to write too
		// (their backends answered in the same round): they run first
		// and add their frames, which leave in this write.
		c.writing = true
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
		c.writing = false
		c.outRoom.Broadcast()
	}
	for len(c.out) > 0 {
		if c.writeErr != nil {
			c.out = c.out[:0]
			return
		}
		buf := c.out
		c.out, c.spare = c.spare[:0], nil
		c.writing = true
		c.mu.Unlock()
		_, err := c.nc.Write(buf)
		c.mu.Lock()
		c.writing = false
		if c.writeBound {
			c.writeBound = false
			_ = c.nc.SetWriteDeadline(time.Time{})
		}
		if c.spare == nil && cap(buf) <= keepOut {
			c.spare = buf[:0]
		}
		if err != nil && c.writeErr == nil {
			c.writeErr = err
			_ = c.nc.Close()
		}
		c.outRoom.Broadcast()
	}
}

// flushAsyncLocked has out sent by a goroutine of its own: the read loop
// never waits for the socket, so a client that reads only once its own
// writes are through is still read from.
func (c *conn) flushAsyncLocked() {
	if c.writing || len(c.out) == 0 {
		return
	}
	c.writing = true
	c.handlers.Add(1)
	go func() {
		defer c.handlers.Done()
		c.mu.Lock()
		c.writing = false
		c.flushLocked()
		c.outRoom.Broadcast()
		c.mu.Unlock()
	}()
}

// sentLocked waits until everything written so far has been sent (or the
// connection has failed).
func (c *conn) sentLocked() {
	for (c.writing || len(c.out) > 0) && c.writeErr == nil {
		if c.writing {
			c.outRoom.Wait()
		} else {
			c.flushLocked()
		}
	}
}

// waitRoomLocked waits while out is full.
func (c *conn) waitRoomLocked() {
	for len(c.out) >= outLimit && c.writeErr == nil {
		if c.writing {
			c.outRoom.Wait()
		} else {
			c.flushLocked()
		}
	}
}

// process acts on one frame; false with the connection error's code.
func (c *conn) process(f any) (http2.ErrCode, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return 0, true
		}
		code := http2.ErrCode(0)
		err := f.ForeachSetting(func(s http2.Setting) error {
			if err := s.Valid(); err != nil {
				if ce, ok := err.(http2.ConnectionError); ok {
					code = http2.ErrCode(ce)
				} else {
					code = http2.ErrCodeProtocol
				}
				return err
			}
			switch s.ID {
			case http2.SettingInitialWindowSize:
				delta := int64(s.Val) - int64(c.peerWindow)
				for _, st := range c.streams {
					st.sendWindow += delta
					if st.sendWindow > 1<<31-1 {
						code = http2.ErrCodeFlowControl
						return errors.New("window overflow")
					}
				}
				c.peerWindow = int32(s.Val)
			case http2.SettingMaxFrameSize:
				c.peerFrame = s.Val
			case http2.SettingHeaderTableSize:
				c.henc.SetMaxDynamicTableSize(s.Val)
			}
			return nil
		})
		if err != nil {
			return code, false
		}
		_ = c.fr.WriteSettingsAck()
		c.wakeWritersLocked()
	case *http2.PingFrame:
		if f.StreamID != 0 {
			return http2.ErrCodeProtocol, false
		}
		if !f.IsAck() {
			_ = c.fr.WritePing(true, f.Data)
		}
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			c.sendWindow += int64(f.Increment)
			if c.sendWindow > 1<<31-1 {
				return http2.ErrCodeFlowControl, false
			}
			c.wakeWritersLocked()
			return 0, true
		}
		st := c.streams[f.StreamID]
		if st == nil {
			if f.StreamID > c.maxClientID {
				return http2.ErrCodeProtocol, false
			}
			return 0, true
		}
		st.sendWindow += int64(f.Increment)
		if st.sendWindow > 1<<31-1 {
			c.resetLocked(f.StreamID, http2.ErrCodeFlowControl)
			return 0, true
		}
		st.wake.Broadcast()
	case *http2.RSTStreamFrame:
		if f.StreamID > c.maxClientID {
			return http2.ErrCodeProtocol, false
		}
		if st := c.streams[f.StreamID]; st != nil {
			st.closeLocked(fmt.Errorf("h2server: stream reset by the client (%v)", f.ErrCode))
		}
	case *http2.GoAwayFrame:
		c.goingAway = true
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			c.resetLocked(f.StreamID, http2.ErrCodeProtocol)
		}
	case *http2.PushPromiseFrame:
		return http2.ErrCodeProtocol, false
	case *headerBlock:
		return c.headersLocked(f)
	case *http2.DataFrame:
		return c.dataLocked(f)
	}
	return 0, true
}

// resetLocked sends RST_STREAM for id and forgets the stream.
func (c *conn) resetLocked(id uint32, code http2.ErrCode) {
	_ = c.fr.WriteRSTStream(id, code)
	if st := c.streams[id]; st != nil {
		st.closeLocked(fmt.Errorf("h2server: stream reset (%v)", code))
	}
}

func (c *conn) wakeWritersLocked() {
	for _, st := range c.streams {
		st.wake.Broadcast()
	}
}

// giveBackLocked returns n bytes of connection window to the client; the
// update is batched until a quarter of the window is due.
func (c *conn) giveBackLocked(n int) {
	c.recvUnsent += n
	if c.recvUnsent >= connWindow/4 {
		_ = c.fr.WriteWindowUpdate(0, uint32(c.recvUnsent))
		c.recvUnsent = 0
	}
}

func (c *conn) dataLocked(f *http2.DataFrame) (http2.ErrCode, bool) {
	n := int(f.Length)
	st := c.streams[f.StreamID]
	if st == nil || st.remoteDone {
		if st == nil && f.StreamID > c.maxClientID {
			return http2.ErrCodeProtocol, false
		}
		c.giveBackLocked(n)
		c.resetLocked(f.StreamID, http2.ErrCodeStreamClosed)
		return 0, true
	}
	if n > st.recvWindow {
		c.giveBackLocked(n)
		c.resetLocked(st.id, http2.ErrCodeFlowControl)
		return 0, true
	}
	data := f.Data()
	st.recvWindow -= n
	if pad := n - len(data); pad > 0 {
		c.giveBackLocked(pad)
		st.giveBackLocked(pad)
	}
	st.received += int64(len(data))
	if st.declared >= 0 && st.received > st.declared {
		c.giveBackLocked(len(data))
		c.resetLocked(st.id, http2.ErrCodeProtocol)
		return 0, true
	}
	if st.bodyClosed || st.err != nil {
		c.giveBackLocked(len(data))
	} else if len(data) > 0 {
		st.buf = append(st.buf, data...)
		st.wake.Broadcast()
	}
	if f.StreamEnded() {
		if st.declared >= 0 && st.received != st.declared {
			c.resetLocked(st.id, http2.ErrCodeProtocol)
			return 0, true
		}
		st.endRemoteLocked()
	}
	return 0, true
}

func (c *conn) headersLocked(f *headerBlock) (http2.ErrCode, bool) {
	id := f.streamID
	if id%2 == 0 {
		return http2.ErrCodeProtocol, false
	}
	if st := c.streams[id]; st != nil {
		// Trailers.
		if st.remoteDone {
			c.resetLocked(id, http2.ErrCodeStreamClosed)
			return 0, true
		}
		if !f.endStream || f.npseudo > 0 {
			c.resetLocked(id, http2.ErrCodeProtocol)
			return 0, true
		}
		if st.req.Trailer == nil {
			st.req.Trailer = http.Header{}
		}
		for _, hf := range f.regular() {
			k := c.canonical(hf.Name)
			if !httpguts.ValidTrailerHeader(k) {
				c.resetLocked(id, http2.ErrCodeProtocol)
				return 0, true
			}
			st.req.Trailer[k] = append(st.req.Trailer[k], hf.Value)
		}
		if st.declared >= 0 && st.received != st.declared {
			c.resetLocked(id, http2.ErrCodeProtocol)
			return 0, true
		}
		st.endRemoteLocked()
		return 0, true
	}
	if id <= c.maxClientID {
		return http2.ErrCodeProtocol, false
	}
	c.maxClientID = id
	if c.goingAway {
		return 0, true // after our GOAWAY: not taken
	}
	if f.hasPriority && f.priority.StreamDep == id {
		_ = c.fr.WriteRSTStream(id, http2.ErrCodeProtocol)
		return 0, true
	}
	if uint32(len(c.streams)) >= c.s.maxStreams {
		_ = c.fr.WriteRSTStream(id, http2.ErrCodeRefusedStream)
		return 0, true
	}
	st := &stream{c: c, id: id, recvWindow: streamWindow, sendWindow: int64(c.peerWindow), declared: -1}
	st.wake.L = &c.mu
	st.remoteDone = f.endStream
	req, status, ok := c.newRequest(st, f)
	if !ok {
		_ = c.fr.WriteRSTStream(id, http2.ErrCodeProtocol)
		return 0, true
	}
	c.streams[id] = st
	// The stream's context is cancelled by the connection alone (the
	// stream reset, the connection gone, the handler done), so it is the
	// own HTTP/1.1 loop's kind: one allocation, no channel until one
	// waits, and the lean transport's close-on-cancel through the hook
	// (context.WithCancel under the connection's was a cancelCtx, its
	// cancel func, an entry in the connection's map of children and,
	// at the first Done, a channel).
	st.ctx = &st.ctxv
	st.ctx.Init(c.ctx, &st.hook)
	st.hook.Begin(st.ctx)
	*req = *req.WithContext(st.ctx) // req is st.reqv; the copy stays on the stack
	st.req = req
	st.rwv = responseWriter{st: st, refuse: status, refuseMsg: st.refuseMsg}
	st.rw = &st.rwv
	if c.running < int(c.s.maxStreams) {
		c.startLocked(st)
		return 0, true
	}
	if len(c.queued) > 4*int(c.s.maxStreams) {
		return http2.ErrCodeEnhanceYourCalm, false // rapid reset
	}
	c.queued = append(c.queued, st)
	return 0, true
}

func (c *conn) startLocked(st *stream) {
	c.running++
	c.handlers.Add(1)
	select {
	case work <- st:
	default:
		go worker(st)
	}
}

// maxIdleWorkers bounds the handler goroutines, of all connections and
// servers, kept waiting for the next stream with the stacks they grew.
const maxIdleWorkers = 64

// work hands a stream to an idle worker; idleWorkers counts them.
var (
	work        = make(chan *stream)
	idleWorkers atomic.Int32
)

// worker runs st's handler, then those of the streams startLocked hands
// it, until it is one idle worker too many. A new goroutine's stack starts
// at the smallest size and is copied as the handler outgrows it, each
// stream again; a waiting worker has grown it already.
func worker(st *stream) {
	growStack()
	for {
		st.run()
		if idleWorkers.Add(1) > maxIdleWorkers {
			idleWorkers.Add(-1)
			return
		}
		st = <-work
		idleWorkers.Add(-1)
	}
}

// A new goroutine's stack starts at the smallest size, which the proxy's
// request path outgrows: each growth copies the stack so far, with the
// pointer adjustment of every frame, deep in the handler. growStack grows
// it once, at the top of the worker, where there is almost nothing to
// copy, to what the request path uses; the worker keeps it for the
// streams it runs next (the front door's handler then skips its own).
const (
	stackGrownTo = 16 << 10
	stackAhead   = stackGrownTo / 2 // the runtime doubles the stack until this frame fits
)

//go:noinline
func growStack() {
	var frame [stackAhead]byte
	keepFrame(frame[:])
}

//go:noinline
func keepFrame([]byte) {}

// handlerDoneLocked starts queued handlers whose streams are still open.
func (c *conn) handlerDoneLocked() {
	c.running--
	for len(c.queued) > 0 && c.running < int(c.s.maxStreams) {
		st := c.queued[0]
		c.queued[0] = nil
		c.queued = c.queued[1:]
		if st.closed {
			continue
		}
		c.startLocked(st)
	}
}

// canonical is a request field name in http.Header's form.
func (c *conn) canonical(name string) string {
	if k, ok := commonCanonical[name]; ok {
		return k
	}
	if k, ok := c.headerKey[name]; ok {
		return k
	}
	k := http.CanonicalHeaderKey(name)
	if c.headerKey == nil {
		c.headerKey = map[string]string{}
	}
	if len(c.headerKey) < 64 {
		c.headerKey[name] = k
	}
	return k
}

// newRequest builds a stream's request; false for a malformed one (the
// stream is reset). status is non-zero when the request is answered
// without its handler (431: the header list is over the limit).
func (c *conn) newRequest(st *stream, f *headerBlock) (*http.Request, int, bool) {
	method := f.pseudoValue("method")
	path := f.pseudoValue("path")
	scheme := f.pseudoValue("scheme")
	authority := f.pseudoValue("authority")
	if method == "" || f.pseudoValue("protocol") != "" {
		return nil, 0, false
	}
	if method == http.MethodConnect {
		if path != "" || scheme != "" || authority == "" {
			return nil, 0, false
		}
	} else if path == "" || scheme == "" {
		return nil, 0, false
	}
	regular := f.regular()
	sc := c.takeScratchLocked()
	st.sc = sc
	hdr := sc.reqHeader(len(regular))
	// One backing array for the values, the stream's when it is large
	// enough; a repeated field gets its own.
	vals := st.valArr[:]
	if len(regular) > len(vals) {
		vals = make([]string, len(regular))
	}
	cookie := -1      // the first cookie field's value in vals
	var more []string // and the others'
	var refused uint8 // connection-specific fields, as bits of refusedNames
	var te int        // TE fields
	for i, hf := range regular {
		// Field names arrive lower case (the Framer refuses others).
		switch hf.Name {
		case "cookie":
			if cookie < 0 {
				cookie, vals[i] = i, hf.Value
			} else {
				more = append(more, hf.Value)
			}
			continue
		case "connection":
			refused |= 1 << 0
		case "keep-alive":
			refused |= 1 << 1
		case "proxy-connection":
			refused |= 1 << 2
		case "transfer-encoding":
			refused |= 1 << 3
		case "upgrade":
			refused |= 1 << 4
		case "te":
			if te++; te > 1 || hf.Value != "trailers" && hf.Value != "" {
				refused |= 1 << 5
			}
		}
		k := c.canonical(hf.Name)
		if vv, ok := hdr[k]; ok {
			hdr[k] = append(vv[:len(vv):len(vv)], hf.Value)
			continue
		}
		vals[i] = hf.Value
		hdr[k] = vals[i : i+1 : i+1]
	}
	if cookie >= 0 {
		// One field, as net/http's server joins them.
		if len(more) > 0 {
			vals[cookie] += "; " + strings.Join(more, "; ")
		}
		hdr["Cookie"] = vals[cookie : cookie+1 : cookie+1]
	}
	status := 0
	if f.truncated {
		status = http.StatusRequestHeaderFieldsTooLarge
	} else if refused != 0 {
		status, st.refuseMsg = http.StatusBadRequest, refusal(refused)
	}
	st.reqv = http.Request{
		Method:     method,
		Proto:      "HTTP/2.0",
		ProtoMajor: 2,
		Header:     hdr,
		RemoteAddr: c.remote,
		TLS:        c.tlsState,
		RequestURI: path,
		Host:       authority,
	}
	req := &st.reqv
	if req.Host == "" {
		req.Host = hdr.Get("Host")
	}
	var err error
	if method == http.MethodConnect {
		req.URL = &url.URL{Host: authority}
		req.RequestURI = authority
	} else if h1wire.PlainRequestURI(path, &sc.url) {
		req.URL = &sc.url
	} else if req.URL, err = url.ParseRequestURI(path); err != nil {
		return nil, 0, false
	}
	if vv := hdr["Content-Length"]; len(vv) > 0 {
		if len(vv) > 1 {
			return nil, 0, false
		}
		n, err := strconv.ParseUint(vv[0], 10, 63)
		if err != nil {
			return nil, 0, false
		}
		st.declared = int64(n)
	}
	for _, v := range hdr["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			k = http.CanonicalHeaderKey(textTrim(k))
			if k != "" && httpguts.ValidTrailerHeader(k) {
				if req.Trailer == nil {
					req.Trailer = http.Header{}
				}
				req.Trailer[k] = nil
			}
		}
	}
	if st.remoteDone {
		if st.declared > 0 {
			return nil, 0, false
		}
		req.Body = http.NoBody
		req.ContentLength = 0
	} else {
		st.bodyv = body{st: st}
		req.Body = &st.bodyv
		req.ContentLength = -1
		if st.declared >= 0 {
			req.ContentLength = st.declared
		}
	}
	return req, status, true
}

// refusedNames are the connection-specific fields, in the order the
// answer names the first present.
var refusedNames = [...]string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade"}

// refusal is the message of net/http's HTTP/2 server's 400 for what
// newRequest found: connection-specific fields (bits 0-4), TE other than
// one "trailers" (bit 5).
func refusal(refused uint8) string {
	for i, k := range refusedNames {
		if refused&(1<<i) != 0 {
			return fmt.Sprintf("request header %q is not valid in HTTP/2", k)
		}
	}
	return `request header "TE" may only be "trailers" in HTTP/2`
}

func textTrim(s string) string { return strings.Trim(s, " \t") }

// stream is one request and its response. Its fields are guarded by the
// connection's mu.
type stream struct {
	c      *conn
	id     uint32
	req    *http.Request // &reqv
	rw     *responseWriter
	ctx    *cancelhook.Ctx
	hook   cancelhook.Hook // the lean transport's close-on-cancel
	wake   sync.Cond       // a body reader or a writer waiting
	reqv   http.Request
	ctxv   cancelhook.Ctx
	valArr [8]string // backs the request's field values

	sendWindow int64
	recvWindow int
	recvUnsent int
	declared   int64 // Content-Length, -1 if none
	received   int64

	buf        []byte // request body received, not read
	remoteDone bool   // END_STREAM received
	bodyClosed bool   // the handler closed the body
	err        error  // reset or connection gone
	closed     bool   // forgotten by the connection
	localDone  bool   // END_STREAM sent

	refuseMsg string
	sc        *streamScratch // the request's and the response's containers
	rwv       responseWriter
	bodyv     body
	// fieldArr backs the response's fields (responseWriter.snap).
	fieldArr [8]field

	readTimer, writeTimer *time.Timer
	readPast, writePast   bool
}

// giveBackLocked returns n bytes of stream window, batched.
func (st *stream) giveBackLocked(n int) {
	st.recvUnsent += n
	st.recvWindow += n
	if st.remoteDone {
		st.recvUnsent = 0
		return
	}
	if st.recvUnsent >= streamWindow/4 || len(st.buf) == 0 && st.recvUnsent >= 16<<10 {
		_ = st.c.fr.WriteWindowUpdate(st.id, uint32(st.recvUnsent))
		st.recvUnsent = 0
	}
}

func (st *stream) endRemoteLocked() {
	st.remoteDone = true
	st.wake.Broadcast()
	if st.localDone {
		st.forgetLocked()
	}
}

// closeLocked ends the stream with err: its reader and writer are woken
// and its context cancelled.
func (st *stream) closeLocked(err error) {
	if st.err == nil {
		st.err = err
	}
	if n := len(st.buf); n > 0 {
		st.c.giveBackLocked(n)
		st.buf = st.buf[:0]
	}
	st.wake.Broadcast()
	if st.ctx != nil {
		st.ctx.Cancel(context.Canceled)
		// As an AfterFunc's, the registered func runs on a goroutine
		// of its own, not under mu.
		go st.hook.Fire()
	}
	st.forgetLocked()
}

func (st *stream) forgetLocked() {
	if st.closed {
		return
	}
	st.closed = true
	delete(st.c.streams, st.id)
	if len(st.c.streams) == 0 && st.c.goingAway && !st.c.closed {
		// The last stream after GOAWAY: the read loop ends the connection.
		st.c.flushLocked()
		_ = st.c.nc.SetReadDeadline(time.Now())
	} else if len(st.c.streams) == 0 && st.c.s.idle > 0 {
		st.c.idleArmed = true
		_ = st.c.nc.SetReadDeadline(time.Now().Add(st.c.s.idle))
	}
}

// run is the stream's handler goroutine.
func (st *stream) run() {
	c := st.c
	defer c.handlers.Done()
	rw := st.rw
	defer func() {
		if e := recover(); e != nil {
			if e != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.s.logf("http2: panic serving %v: %v\n%s", c.remote, e, buf)
			}
			c.mu.Lock()
			if !st.closed {
				c.resetLocked(st.id, http2.ErrCodeInternal)
			}
			c.flushLocked()
			c.handlerDoneLocked()
			c.mu.Unlock()
			st.stopTimers(false)
			st.ctx.Cancel(context.Canceled)
			return
		}
	}()
	switch rw.refuse {
	case 0:
		c.handler.ServeHTTP(rw, st.req)
	case http.StatusRequestHeaderFieldsTooLarge:
		rw.WriteHeader(rw.refuse)
		_, _ = io.WriteString(rw, "<h1>HTTP Error 431</h1><p>Request Header Field(s) Too Large</p>")
	default:
		http.Error(rw, rw.refuseMsg, rw.refuse)
	}
	rw.finish()
	st.stopTimers(true)
	st.ctx.Cancel(context.Canceled)
}

// stopTimers stops the stream's deadlines; with reuse, the handler has
// returned and its containers go to the connection's next streams.
func (st *stream) stopTimers(reuse bool) {
	c := st.c
	c.mu.Lock()
	if st.readTimer != nil {
		st.readTimer.Stop()
	}
	if st.writeTimer != nil {
		st.writeTimer.Stop()
	}
	if reuse && st.sc != nil {
		c.putScratchLocked(st.sc)
		st.sc = nil
	}
	c.mu.Unlock()
}

// body is a request body: what the stream's DATA frames carried, read with
// backpressure.
type body struct {
	st         *stream
	sawEOF     bool
	sentContin bool
}

func (b *body) Read(p []byte) (int, error) {
	st := b.st
	c := st.c
	if b.sawEOF {
		return 0, io.EOF
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !b.sentContin {
		b.sentContin = true
		if st.err == nil && !st.remoteDone && len(st.buf) == 0 && st.rw != nil && !st.rw.sentHeader &&
			strings.EqualFold(st.req.Header.Get("Expect"), "100-continue") {
			c.writeHeadersLocked(st, 100, nil, false)
			c.flushLocked()
		}
	}
	for len(st.buf) == 0 {
		switch {
		case st.bodyClosed:
			return 0, http.ErrBodyReadAfterClose
		case st.readPast:
			return 0, os.ErrDeadlineExceeded
		case st.remoteDone:
			b.sawEOF = true
			return 0, io.EOF
		case st.err != nil:
			return 0, st.err
		}
		if len(c.out) > 0 && !c.writing {
			c.flushLocked() // window updates due; mu was let go: look again
			continue
		}
		st.wake.Wait()
	}
	n := copy(p, st.buf)
	st.buf = st.buf[:copy(st.buf, st.buf[n:])]
	c.giveBackLocked(n)
	st.giveBackLocked(n)
	if len(st.buf) == 0 {
		c.flushLocked()
	}
	return n, nil
}

func (b *body) Close() error {
	st := b.st
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if !st.bodyClosed {
		st.bodyClosed = true
		if n := len(st.buf); n > 0 {
			c.giveBackLocked(n)
			st.buf = st.buf[:0]
		}
		st.wake.Broadcast()
	}
	return nil
}

// writeHeadersLocked encodes and writes a HEADERS frame (and
// CONTINUATION frames) with :status and h's fields; trailers (status 0)
// carry h's fields only.
func (c *conn) writeHeadersLocked(st *stream, status int, h []field, end bool) {
	c.hbuf = c.hbuf[:0]
	if status != 0 {
		_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: statusText(status)})
	}
	for _, f := range h {
		k, v := f.k, f.v
		if strings.HasPrefix(k, http.TrailerPrefix) {
			if status != 0 {
				continue
			}
			k = k[len(http.TrailerPrefix):]
		}
		lk, ok := commonLower[k]
		if !ok {
			if !httpguts.ValidHeaderFieldName(k) {
				continue
			}
			lk = lower(k)
		}
		switch lk {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te":
			continue
		}
		if !f.valid && !h1wire.ValidFieldValue(v) {
			continue
		}
		if uniqueValues[lk] {
			c.hbuf = appendUnindexed(c.hbuf, lk, v)
			continue
		}
		_ = c.henc.WriteField(hpack.HeaderField{Name: lk, Value: v})
	}
	if end {
		st.localDone = true
	}
	block := c.hbuf
	first := true
	for first || len(block) > 0 {
		n := min(len(block), int(c.peerFrame))
		frag := block[:n]
		block = block[n:]
		if first {
			_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: frag, EndStream: end, EndHeaders: len(block) == 0})
			first = false
		} else {
			_ = c.fr.WriteContinuation(st.id, len(block) == 0, frag)
		}
	}
}

// uniqueValues are response fields whose value is new on every response
// (a request's trace or id): the encoder would Huffman-code each and add
// it to the dynamic table, where it pushes out the fields that do repeat.
// They are sent as literals without indexing, their names and values as
// they are.
var uniqueValues = map[string]bool{"x-tether-trace-id": true, "traceparent": true, "x-request-id": true}

// appendUnindexed appends the field as an HPACK literal without indexing,
// with a literal name; neither string is Huffman-coded.
func appendUnindexed(dst []byte, name, value string) []byte {
	dst = append(dst, 0)
	dst = appendHpackInt(dst, 0, 7, uint64(len(name)))
	dst = append(dst, name...)
	dst = appendHpackInt(dst, 0, 7, uint64(len(value)))
	return append(dst, value...)
}

// appendHpackInt appends n as an HPACK integer with an n-bit prefix
// (RFC 7541, 5.1), the first byte's other bits being first's.
func appendHpackInt(dst []byte, first byte, n uint, i uint64) []byte {
	k := uint64(1)<<n - 1
	if i < k {
		return append(dst, first|byte(i))
	}
	dst = append(dst, first|byte(k))
	i -= k
	for ; i >= 128; i >>= 7 {
		dst = append(dst, byte(0x80|i&0x7f))
	}
	return append(dst, byte(i))
}

var statusCodes [600]string

func statusText(code int) string {
	if code >= 100 && code < len(statusCodes) {
		if s := statusCodes[code]; s != "" {
			return s
		}
	}
	return strconv.Itoa(code)
}

func init() {
	for i := 100; i < len(statusCodes); i++ {
		statusCodes[i] = strconv.Itoa(i)
	}
}

// writeDataLocked sends p on st within the flow-control windows, waiting
// for window as it must; end sets END_STREAM on the last frame.
func (c *conn) writeDataLocked(st *stream, p []byte, end bool) error {
	for {
		if st.err != nil {
			return st.err
		}
		if st.writePast {
			return os.ErrDeadlineExceeded
		}
		if c.writeErr != nil {
			return c.writeErr
		}
		if len(p) == 0 {
			if end {
				st.localDone = true
				_ = c.fr.WriteData(st.id, true, nil)
			}
			return nil
		}
		n := int64(len(p))
		n = min(n, st.sendWindow, c.sendWindow, int64(c.peerFrame), writeBufSize)
		if n <= 0 {
			if len(c.out) > 0 && !c.writing {
				c.flushLocked() // mu was let go: look again
				continue
			}
			st.wake.Wait()
			continue
		}
		if len(c.out) >= outLimit {
			c.waitRoomLocked()
			continue
		}
		last := end && n == int64(len(p))
		if last {
			st.localDone = true
		}
		if err := c.fr.WriteData(st.id, last, p[:n]); err != nil {
			c.writeErr = err
			return err
		}
		st.sendWindow -= n
		c.sendWindow -= n
		p = p[n:]
		if last {
			return nil
		}
	}
}
