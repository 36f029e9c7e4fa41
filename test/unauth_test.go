package test

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// rssBytes is a process's resident set size from /proc.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc status")
	return 0
}

// metricSum adds up every sample of a metric family on an agent's /metrics.
func metricSum(t *testing.T, a *clusterAgent, name string) (float64, bool) {
	t.Helper()
	st, _, body := testutil.Get(t, http.DefaultClient, a.adminURL+"/metrics", nil)
	if st != 200 {
		return 0, false
	}
	sum, found := 0.0, false
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum, found = sum+v, true
		}
	}
	return sum, found
}

// TestUnauthenticatedRaftChurnLogsOncePerReason: connections to the Raft
// port without the secret (garbage instead of TLS, and TLS with a wrong
// proof), 600 of each as fast as the node takes them: each is refused,
// the log says so at most once per reason (not once per connection) and
// the refusals are counted by reason.
func TestUnauthenticatedRaftChurnLogsOncePerReason(t *testing.T) {
	e := newClusterEnv(t, cookieConfig(testutil.NewBackend(t, "b1")))
	n1 := e.form(1)[0]
	raftAddr := e.RaftAddr("n1")
	const each = 600
	var refused atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(20 * time.Second)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 2*each && time.Now().Before(deadline); i += 8 {
				c, err := net.DialTimeout("tcp", raftAddr, 5*time.Second)
				if err != nil {
					continue
				}
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if i%2 == 0 {
					c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) // not TLS at all
				} else {
					tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, NextProtos: []string{"tether-raft-2"}})
					if tc.Handshake() == nil {
						msg := binary.BigEndian.AppendUint16(nil, 0)
						tc.Write(append(msg, make([]byte, 32)...)) // a proof made without the secret
					}
					c = tc
				}
				// The node refuses (and logs) before it closes: wait for the close.
				if _, err := io.Copy(io.Discard, c); err == nil || !isTimeout(err) {
					refused.Add(1)
				}
				c.Close()
			}
		}()
	}
	wg.Wait()
	if refused.Load() < each {
		t.Fatalf("only %d of %d connections were closed by the node", refused.Load(), 2*each)
	}
	lines := 0
	for _, l := range strings.Split(n1.Stderr.String(), "\n") {
		if strings.Contains(l, "raft connection") && strings.Contains(l, "refused") {
			lines++
		}
	}
	t.Logf("%d connections refused, %d log lines", refused.Load(), lines)
	if lines > 4 {
		t.Errorf("%d log lines for %d refused connections: want at most one per reason per 30 s", lines, refused.Load())
	}
	testutil.Eventually(t, 10*time.Second, "every refusal counted in tether_raft_connections_refused_total", func() bool {
		sum, _ := metricSum(t, n1, "tether_raft_connections_refused_total")
		return sum >= float64(refused.Load())
	})
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestUnauthenticatedGossipStreamsCannotGrowTheNode: twelve connections to
// the gossip port, each announcing an encrypted frame and streaming all of
// it but the last bytes (memberlist buffers a frame whole before it
// decrypts it). A ~20 MiB frame, which no member sends, is refused at its
// header; of twelve 8 MiB frames from twelve addresses only the 32 MiB
// budget is read, the rest refused at once. The node's resident memory
// stays within a few tens of MB.
func TestUnauthenticatedGossipStreamsCannotGrowTheNode(t *testing.T) {
	e := newClusterEnv(t, cookieConfig(testutil.NewBackend(t, "b1")))
	n1 := e.form(1)[0]
	gossipAddr := e.GossipAddr("n1")
	pid := n1.Cmd.Process.Pid
	// The race detector's shadow memory triples what the heap holds.
	limit := int64(64 << 20)
	if raceBuild {
		limit = 160 << 20
	}
	for _, phase := range []struct {
		frame    uint32
		distinct bool // one source address per connection
		refused  int  // connections the node closes before their frame ends
	}{{20 << 20, false, 12}, {8 << 20, true, 8}} {
		before := rssBytes(t, pid)
		var peak atomic.Int64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				if r := rssBytes(t, pid); r > peak.Load() {
					peak.Store(r)
				}
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
		var wg sync.WaitGroup
		var closedEarly atomic.Int64
		chunk := make([]byte, 256<<10)
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := net.Dialer{}
				if phase.distinct {
					d.LocalAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(i+1))}
				}
				c, err := d.Dial("tcp", gossipAddr)
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				hdr := binary.BigEndian.AppendUint32([]byte{10}, phase.frame) // memberlist's encryptMsg
				if _, err := c.Write(hdr); err != nil {
					closedEarly.Add(1)
					return
				}
				c.SetWriteDeadline(time.Now().Add(30 * time.Second))
				n := int(phase.frame) - 64
				for sent := 0; sent < n; sent += len(chunk) {
					if _, err := c.Write(chunk[:min(len(chunk), n-sent)]); err != nil {
						closedEarly.Add(1)
						return
					}
				}
				// Hold the connection with the frame incomplete.
				c.SetReadDeadline(time.Now().Add(3 * time.Second))
				if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
					closedEarly.Add(1)
				}
			}()
		}
		wg.Wait()
		close(stop)
		<-sampled
		growth := peak.Load() - before
		t.Logf("%d MiB frames: resident memory %d MB before, peak %d MB (+%d MB); %d of 12 connections closed by the node before their frame ended",
			phase.frame>>20, before>>20, peak.Load()>>20, growth>>20, closedEarly.Load())
		if growth > limit {
			t.Errorf("%d MiB frames: resident memory grew by %d MB for 12 unauthenticated gossip streams; want < %d MB", phase.frame>>20, growth>>20, limit>>20)
		}
		if closedEarly.Load() != int64(phase.refused) {
			t.Errorf("%d MiB frames: %d of 12 connections were closed by the node before their frame ended; want %d", phase.frame>>20, closedEarly.Load(), phase.refused)
		}
	}
}
