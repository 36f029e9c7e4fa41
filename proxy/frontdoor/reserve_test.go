//go:build unix

package frontdoor

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/test/testutil"
)

// TestReservedListenersRefuseUntilStarted: Reserve holds each listener's
// port (":0" resolved, nobody else may bind it) while a connection to it is
// refused; Start then serves on the same port.
func TestReservedListenersRefuseUntilStarted(t *testing.T) {
	_, free, _ := net.SplitHostPort(testutil.FreeAddr(t))
	for _, addr := range []string{"127.0.0.1:0", ":0", "[::1]:0", "localhost:" + free} {
		t.Run(addr, func(t *testing.T) {
			cfg := &config.Config{Listeners: []config.Listener{{Address: addr}}}
			s, err := New(cfg, http.HandlerFunc(okHandler), nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Reserve(); err != nil {
				if addr == "[::1]:0" {
					t.Skipf("no IPv6 loopback: %v", err)
				}
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = s.Shutdown(ctx)
			})
			addrs := s.Addrs()
			if len(addrs) == 0 || addrs[0].(*net.TCPAddr).Port == 0 {
				t.Fatalf("reserved addresses %v", addrs)
			}
			port := addrs[0].(*net.TCPAddr).Port
			dial := "127.0.0.1:" + strconv.Itoa(port)
			if addr == "[::1]:0" {
				dial = "[::1]:" + strconv.Itoa(port)
			}
			if c, err := net.DialTimeout("tcp", dial, time.Second); err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
				if c != nil {
					c.Close()
				}
				t.Fatalf("a connection to a reserved port: %v, want refused", err)
			}
			if ln, err := net.Listen("tcp", dial); err == nil {
				ln.Close()
				t.Fatalf("another listener took the reserved port %s", dial)
			}
			if s.Serving() {
				t.Fatal("Serving before Start")
			}
			if err := s.Start(); err != nil {
				t.Fatal(err)
			}
			if got := s.Addrs()[0].(*net.TCPAddr).Port; got != port || len(s.Addrs()) != len(addrs) {
				t.Fatalf("started on %v, reserved %v", s.Addrs(), addrs)
			}
			resp, err := http.Get("http://" + dial + "/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || !s.Serving() {
				t.Fatalf("after Start: %d serving=%v", resp.StatusCode, s.Serving())
			}
		})
	}
}

// TestReserveNamesAddressInUse: a port in use fails Reserve, as Start.
func TestReserveNamesAddressInUse(t *testing.T) {
	s, _ := serverOnAPortInUse(t)
	if err := s.Reserve(); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Reserve = %v, want address in use", err)
	}
}

// TestReserveTakesAPortAnEarlierProcessLeftInTimeWait: a node restarted on
// its proxy port finds the connections its earlier process closed first in
// TIME-WAIT on that port for up to a minute; Reserve takes the port anyway,
// as net.Listen does, while a port another socket listens on still fails.
func TestReserveTakesAPortAnEarlierProcessLeftInTimeWait(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	sc.Close() // the server side closes first: its end of the pair waits in TIME-WAIT on the port
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read after the server closed: no EOF")
	}
	c.Close()
	ln.Close()

	cfg := &config.Config{Listeners: []config.Listener{{Address: addr}}}
	s, err := New(cfg, http.HandlerFunc(okHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve(); err != nil {
		t.Fatalf("Reserve on a port with only a closed connection in TIME-WAIT: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("a connection to the reserved port: %v, want refused", err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("after Start: %d", resp.StatusCode)
	}
}
