package sockio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// tcpPair is a connected pair of loopback TCP connections: a the dialed
// side (a Conn when wrap), b the accepted side (plain).
func tcpPair(t testing.TB, wrap bool) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	a, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if wrap {
		a = Wrap(a)
		if _, ok := a.(*Conn); !ok {
			t.Fatalf("Wrap(%T) did not wrap", a)
		}
	}
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c
}

// errShape is what callers look at in a Read or Write error.
type errShape struct {
	n        int
	nil, eof bool
	op       string
	timeout  bool
	closed   bool
	reset    bool // ECONNRESET or EPIPE
}

func shapeOf(n int, err error) errShape {
	s := errShape{n: n, nil: err == nil, eof: err == io.EOF}
	var oe *net.OpError
	if errors.As(err, &oe) {
		s.op = oe.Op
		s.timeout = oe.Timeout()
	}
	s.closed = errors.Is(err, net.ErrClosed)
	s.reset = errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
	if s.timeout != errors.Is(err, os.ErrDeadlineExceeded) {
		s.timeout = false // both or neither, as net.TCPConn's
	}
	return s
}

// TestSockConnBehavesAsTCPConn runs each case on a plain TCPConn and on a
// Conn and wants the same result: bytes, EOF, deadlines, closes and
// resets look to callers as net.TCPConn's do.
func TestSockConnBehavesAsTCPConn(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, a, b net.Conn) errShape
	}{
		{"read what the peer wrote", func(t *testing.T, a, b net.Conn) errShape {
			b.Write([]byte("hello"))
			buf := make([]byte, 16)
			n, err := io.ReadAtLeast(a, buf, 5)
			if string(buf[:n]) != "hello" {
				t.Errorf("read %q", buf[:n])
			}
			return shapeOf(n, err)
		}},
		{"write what the peer reads", func(t *testing.T, a, b net.Conn) errShape {
			n, err := a.Write([]byte("world"))
			buf := make([]byte, 5)
			if _, err := io.ReadFull(b, buf); err != nil || string(buf) != "world" {
				t.Errorf("peer read %q, %v", buf, err)
			}
			return shapeOf(n, err)
		}},
		{"zero-length read", func(t *testing.T, a, b net.Conn) errShape { return shapeOf(a.Read(nil)) }},
		{"zero-length write", func(t *testing.T, a, b net.Conn) errShape { return shapeOf(a.Write(nil)) }},
		{"EOF once the peer closed", func(t *testing.T, a, b net.Conn) errShape {
			b.Close()
			return shapeOf(a.Read(make([]byte, 8)))
		}},
		{"read deadline passed", func(t *testing.T, a, b net.Conn) errShape {
			a.SetReadDeadline(time.Now().Add(-time.Second))
			return shapeOf(a.Read(make([]byte, 8)))
		}},
		{"read deadline fires while waiting", func(t *testing.T, a, b net.Conn) errShape {
			a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			return shapeOf(a.Read(make([]byte, 8)))
		}},
		{"read after a deadline is cleared", func(t *testing.T, a, b net.Conn) errShape {
			a.SetReadDeadline(time.Now().Add(-time.Second))
			a.Read(make([]byte, 8))
			a.SetReadDeadline(time.Time{})
			b.Write([]byte("x"))
			return shapeOf(a.Read(make([]byte, 8)))
		}},
		{"read on a closed connection", func(t *testing.T, a, b net.Conn) errShape {
			a.Close()
			return shapeOf(a.Read(make([]byte, 8)))
		}},
		{"close ends a waiting read", func(t *testing.T, a, b net.Conn) errShape {
			go func() {
				time.Sleep(20 * time.Millisecond) // let the read wait first
				a.Close()
			}()
			return shapeOf(a.Read(make([]byte, 8)))
		}},
		{"write on a closed connection", func(t *testing.T, a, b net.Conn) errShape {
			a.Close()
			return shapeOf(a.Write([]byte("x")))
		}},
		{"write to a peer that reset", func(t *testing.T, a, b net.Conn) errShape {
			b.(*net.TCPConn).SetLinger(0)
			b.Close() // RST
			deadline := time.Now().Add(10 * time.Second)
			for {
				n, err := a.Write(make([]byte, 1024))
				if err != nil || time.Now().After(deadline) {
					s := shapeOf(n, err)
					s.n = 0 // how many writes got through before the reset was seen is the kernel's
					return s
				}
			}
		}},
		{"large write waits for the peer to read", func(t *testing.T, a, b net.Conn) errShape {
			big := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB, past any socket buffer
			got := make(chan []byte, 1)
			go func() {
				all, _ := io.ReadAll(io.LimitReader(b, int64(len(big))))
				got <- all
			}()
			n, err := a.Write(big)
			if all := <-got; !bytes.Equal(all, big) {
				t.Errorf("peer read %d bytes, not what was written", len(all))
			}
			return shapeOf(n, err)
		}},
		{"write deadline passed", func(t *testing.T, a, b net.Conn) errShape {
			a.SetWriteDeadline(time.Now().Add(-time.Second))
			return shapeOf(a.Write([]byte("x")))
		}},
		{"write deadline stops a write the peer does not read", func(t *testing.T, a, b net.Conn) errShape {
			a.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := a.Write(make([]byte, 64<<20))
			if n >= 64<<20 {
				t.Errorf("wrote all %d bytes", n)
			}
			s := shapeOf(n, err)
			s.n = 0 // what fit in the buffers is the kernel's
			return s
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tcpPair(t, false)
			want := tc.run(t, a, b)
			a, b = tcpPair(t, true)
			got := tc.run(t, a, b)
			if got != want {
				t.Errorf("Conn: %+v\nTCPConn:  %+v", got, want)
			}
		})
	}
}

// TestSockConnReadsAndWritesAtOnce: reads and writes from several
// goroutines at once keep every byte, as Conn promises (run with -race).
func TestSockConnReadsAndWritesAtOnce(t *testing.T) {
	a, b := tcpPair(t, true)
	const writers, each = 4, 2000
	var wg sync.WaitGroup
	// b echoes what a writes; a reads it back.
	go io.Copy(b, b)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := []byte{byte('a' + w)}
			for range each {
				if _, err := a.Write(msg); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	counts := make([]int, writers)
	var rmu sync.Mutex
	total := 0
	var rwg sync.WaitGroup
	a.SetReadDeadline(time.Now().Add(30 * time.Second))
	for range 2 {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			buf := make([]byte, 64)
			for {
				rmu.Lock()
				done := total == writers*each
				rmu.Unlock()
				if done {
					return
				}
				n, err := a.Read(buf)
				rmu.Lock()
				for _, c := range buf[:n] {
					counts[c-'a']++
				}
				total += n
				done = total == writers*each
				rmu.Unlock()
				if done {
					a.SetReadDeadline(time.Now()) // ends the other reader's wait
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	rwg.Wait()
	for w, n := range counts {
		if n != each {
			t.Errorf("writer %c: %d bytes came back, want %d", 'a'+w, n, each)
		}
	}
}

// BenchmarkStalePeek: what the check that a pooled backend connection is
// still clean costs before its reuse (NothingToRead: one recvfrom with
// MSG_PEEK that finds nothing), beside a bare getpid(2). Where entering
// the kernel is dear (a VM), the two are close: the peek can be removed,
// not made cheaper (proxy/DESIGN.md, "Measured and left alone").
func BenchmarkStalePeek(b *testing.B) {
	a, _ := tcpPair(b, false)
	raw, err := a.(*net.TCPConn).SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("peek", func(b *testing.B) {
		var buf [1]byte
		raw.Read(func(fd uintptr) bool {
			for b.Loop() {
				if !NothingToRead(fd, buf[:]) {
					b.Fatal("an idle connection had something to read")
				}
			}
			return true
		})
	})
	b.Run("getpid", func(b *testing.B) {
		for b.Loop() {
			syscall.Getpid()
		}
	})
}
