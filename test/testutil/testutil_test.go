package testutil

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	Eventually(t, 5*time.Second, "three tries", func() bool { return n.Add(1) == 3 })
	if n.Load() != 3 {
		t.Fatalf("tried %d times", n.Load())
	}
}

// fakeT records a Fatalf instead of stopping the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = format
}

func TestEventuallyFailsAfterItsDeadline(t *testing.T) {
	ft := &fakeT{TB: t}
	start := time.Now()
	tries := 0
	Eventually(ft, 50*time.Millisecond, "never", func() bool {
		tries++
		// Fatalf does not stop a fakeT: end the loop once it was called.
		return ft.failed != ""
	})
	if ft.failed == "" || time.Since(start) < 50*time.Millisecond || tries < 2 {
		t.Fatalf("failed %q after %v and %d tries", ft.failed, time.Since(start), tries)
	}
}

func TestSyncBufferTakesConcurrentWrites(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = b.Write([]byte("x"))
			}
		}()
	}
	wg.Wait()
	if len(b.String()) != 800 {
		t.Fatalf("%d bytes", len(b.String()))
	}
}

func TestFreeAddrCanBeListenedOn(t *testing.T) {
	ln, err := net.Listen("tcp", FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}

func TestWriteFileReplaces(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	WriteFile(t, p, "one")
	WriteFile(t, p, "two")
	if b, _ := os.ReadFile(p); string(b) != "two" {
		t.Fatalf("%q", b)
	}
	if _, err := os.Stat(p + ".tmp"); !os.IsNotExist(err) {
		t.Fatal("the temporary file was left behind")
	}
}

func TestCertFilesLoad(t *testing.T) {
	certFile, keyFile, pool := CertFiles(t)
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	if pool == nil {
		t.Fatal("no pool")
	}
}

func TestRawServerHandsOutConnectionsInOrder(t *testing.T) {
	s := NewRawServer(t, func(i int, c net.Conn, br *bufio.Reader) {
		Answer(br, c, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\n%d", i))
	})
	for want := range 2 {
		resp, err := http.Get(s.URL())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != fmt.Sprint(want) {
			t.Fatalf("connection %d answered %q", want, b)
		}
	}
	if s.Conns() != 2 {
		t.Fatalf("%d connections", s.Conns())
	}
}

// TestFreeAddrNeverRepeats: one binary's addresses differ, even when the
// kernel hands a port just closed to the next bind.
func TestFreeAddrNeverRepeats(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		a := FreeAddr(t)
		if seen[a] {
			t.Fatalf("FreeAddr handed out %s twice", a)
		}
		seen[a] = true
	}
}
