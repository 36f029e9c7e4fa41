package testutil

import (
	"bytes"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// Poll is how often Eventually tries its condition.
const Poll = 10 * time.Millisecond

// Eventually polls cond until it holds, and fails t naming what it waited
// for when within passes first. It is the one poll of every package's tests
// (TestOnePollForEveryPackage): call it directly, with the timeout and the
// description the wait needs, rather than through a local wrapper.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(within, cond) {
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// Until polls cond until it holds or within passes, and reports whether it
// held: Eventually for a caller that says itself what failed.
func Until(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(Poll)
	}
	return true
}

// SyncBuffer is a bytes.Buffer safe for a writer goroutine (a process's
// output, a server's error log) and the test reading it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// Reset drops everything written so far.
func (s *SyncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

// String is everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FreeAddr is a loopback address whose port is free now (another process
// may take it before it is used: for addresses a child process must be
// told in advance). It never hands out the same address twice in one test
// binary: the kernel may give a port just closed to the next bind, and two
// addresses of one node (its Raft and gossip ports) must differ.
func FreeAddr(t testing.TB) string {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if _, taken := handedOut.LoadOrStore(addr, true); !taken {
			return addr
		}
	}
	t.Fatal("no loopback port that was not handed out before")
	return ""
}

// handedOut holds every address FreeAddr returned.
var handedOut sync.Map

// WriteFile replaces path with content atomically (a watcher never reads it
// half-written).
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
