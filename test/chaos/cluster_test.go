package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// proc is one node: its fixed ports, its current Raft/gossip IP and its
// process. Ports never change; an address change moves the IP.
type proc struct {
	id                       string
	uid                      int
	raftPort, gossipPort     string
	adminAddr, proxyAddr     string
	ip                       string
	dataDir, secret, logPath string
	// clockPath holds the offset of its wall clock (a Go duration), read
	// by the chaosclock build of tether (TETHER_CHAOS_CLOCK_FILE).
	clockPath string
	config    string

	// Guarded by cluster.mu.
	cmd     *exec.Cmd
	done    chan struct{}
	running bool
	paused  bool
	// liveSince is when it last became live (started, resumed, healed).
	liveSince time.Time
	// starts counts its process starts (the epoch of an operation).
	starts int
	// stopping: a SIGKILL or SIGTERM was sent; it is no longer live.
	stopping bool
}

func (p *proc) raftAddr() string { return p.ip + ":" + p.raftPort }

func (p *proc) gossipAddr() string { return p.ip + ":" + p.gossipPort }

func (p *proc) adminURL() string { return "http://" + p.adminAddr }

func (p *proc) proxyURL() string { return "http://" + p.proxyAddr }

// cluster is the set of nodes plus the ground truth the checker needs:
// which nodes are live (running, not paused, not cut off) and since when.
type cluster struct {
	t      *testing.T
	bin    string
	dir    string
	procs  []*proc
	nextIP int
	asUIDs bool

	mu       sync.Mutex
	isolated map[string]bool // on the minority side of a partition
}

const (
	nodes    = 5
	expect   = 3
	voters   = 3
	baseUID  = 61000
	httpWait = 3 * time.Second
)

// newCluster prepares the nodes; config gives a node's configuration file
// for its proxy listener address.
func newCluster(t *testing.T, bin, dir string, config func(listen string) string) *cluster {
	c := &cluster{t: t, bin: bin, dir: dir, nextIP: 2, asUIDs: partitions.on, isolated: map[string]bool{}}
	secret := "the-chaos-cluster-secret-0123456789abcdef"
	for i := 1; i <= nodes; i++ {
		p := &proc{id: fmt.Sprintf("n%d", i), uid: baseUID + i, ip: "127.0.0.1"}
		p.raftPort = port(t)
		p.gossipPort = port(t)
		p.adminAddr = testutil.FreeAddr(t)
		p.proxyAddr = testutil.FreeAddr(t)
		p.dataDir = filepath.Join(dir, p.id)
		p.secret = filepath.Join(dir, p.id+".secret")
		p.logPath = filepath.Join(dir, p.id+".log")
		p.clockPath = filepath.Join(dir, p.id+".clock")
		p.config = filepath.Join(dir, p.id+".json")
		if err := os.WriteFile(p.config, []byte(config(p.proxyAddr)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p.secret, []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
		c.own(p, p.secret)
		c.procs = append(c.procs, p)
	}
	if os.Getenv(netnsEnv) == "1" {
		// In the test's own network namespace: the nodes' ports are never
		// handed out as the local port of an outgoing connection (a
		// client's, or a node's), which would keep a node that restarts
		// from listening on its own port.
		var ports []string
		for _, p := range c.procs {
			ports = append(ports, p.raftPort, p.gossipPort, p.adminAddr[strings.LastIndexByte(p.adminAddr, ':')+1:], p.proxyAddr[strings.LastIndexByte(p.proxyAddr, ':')+1:])
		}
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_local_reserved_ports", []byte(strings.Join(ports, ",")), 0o644); err != nil {
			t.Fatalf("reserving the nodes' ports: %v", err)
		}
	}
	return c
}

func port(t *testing.T) string {
	a := testutil.FreeAddr(t)
	return a[strings.LastIndexByte(a, ':')+1:]
}

// own gives a node's uid its files (when nodes run under their own uids).
func (c *cluster) own(p *proc, path string) {
	if c.asUIDs {
		if err := os.Chown(path, p.uid, p.uid); err != nil {
			c.t.Fatal(err)
		}
	}
}

func (c *cluster) byID(id string) *proc {
	for _, p := range c.procs {
		if p.id == id {
			return p
		}
	}
	return nil
}

// start runs the node's agent (its data dir is kept; create it if new).
func (c *cluster) start(p *proc) error {
	if err := os.MkdirAll(p.dataDir, 0o700); err != nil {
		return err
	}
	c.own(p, p.dataDir)
	var join []string
	for _, q := range c.procs {
		if q != p {
			join = append(join, q.gossipAddr())
		}
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "--- chaos: start %s at %s (raft %s)\n", p.id, time.Now().Format(time.RFC3339Nano), p.raftAddr())
	cmd := exec.Command(c.bin, "agent", "--config", p.config, "--node-id", p.id, "--data-dir", p.dataDir,
		"--admin-addr", p.adminAddr,
		"--raft-addr", p.raftAddr(), "--gossip-addr", p.gossipAddr(),
		"--cluster-secret-file", p.secret, "--bootstrap-expect", fmt.Sprint(expect), "--raft-voters", fmt.Sprint(voters),
		"--join", strings.Join(join, ","), "--no-access-log")
	cmd.Stdout, cmd.Stderr = io.Discard, logf
	cmd.Env = append(os.Environ(), "TETHER_CHAOS_CLOCK_FILE="+p.clockPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c.asUIDs {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(p.uid), Gid: uint32(p.uid)}
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		logf.Close()
		close(done)
	}()
	c.mu.Lock()
	p.cmd, p.done, p.running, p.paused, p.liveSince = cmd, done, true, false, time.Now()
	p.starts++
	p.stopping = false
	c.mu.Unlock()
	// Up once its admin API answers.
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-done:
			return fmt.Errorf("%s exited at start (see %s)", p.id, p.logPath)
		default:
		}
		if st, _ := httpGet(p.adminURL() + "/healthz"); st == 200 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: admin API not up within 60 s", p.id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// epoch is the node's process start count (0: never started).
func (c *cluster) epoch(p *proc) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return p.starts
}

// signal sends sig to the node's process; it reports whether one ran.
func (c *cluster) signal(p *proc, sig syscall.Signal) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !p.running {
		return false
	}
	p.cmd.Process.Signal(sig)
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		if p.paused {
			p.paused, p.liveSince = false, time.Now()
		}
	case syscall.SIGKILL, syscall.SIGTERM:
		p.stopping = true
	}
	return true
}

// wait waits for the node's process to end within d; false if it did not.
func (c *cluster) wait(p *proc, d time.Duration) bool {
	c.mu.Lock()
	done := p.done
	c.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		c.mu.Lock()
		p.running, p.paused = false, false
		c.mu.Unlock()
		return true
	case <-time.After(d):
		return false
	}
}

// kill ends the node at once (SIGKILL, a paused one too).
func (c *cluster) kill(p *proc) {
	c.signal(p, syscall.SIGKILL)
	c.wait(p, 30*time.Second)
}

// stop ends the node gracefully, then hard after 20 s.
func (c *cluster) stop(p *proc) {
	c.signal(p, syscall.SIGCONT)
	if c.signal(p, syscall.SIGTERM) && !c.wait(p, 20*time.Second) {
		c.kill(p)
	}
}

func (c *cluster) stopAll() {
	var wg sync.WaitGroup
	for _, p := range c.procs {
		wg.Add(1)
		go func() { defer wg.Done(); c.kill(p) }()
	}
	wg.Wait()
}

// live reports the ground truth for the checker: running, not paused,
// not cut off; and since when.
func (c *cluster) live(id string) (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.byID(id)
	if p == nil || !p.running || p.paused || p.stopping || c.isolated[id] {
		return false, time.Time{}
	}
	return true, p.liveSince
}

func (c *cluster) liveSet() map[string]bool {
	out := map[string]bool{}
	for _, p := range c.procs {
		out[p.id], _ = c.live(p.id)
	}
	return out
}

// partition cuts the nodes of small off from all others (both ways):
// iptables drops, by the sending process's uid, the packets to the other
// side's Raft, gossip and admin ports.
func (c *cluster) partition(small []string) error {
	for _, a := range c.procs {
		for _, b := range c.procs {
			if slices.Contains(small, a.id) == slices.Contains(small, b.id) {
				continue
			}
			for _, proto := range []string{"tcp", "udp"} {
				if err := iptables("-A", chain, "-o", "lo", "-m", "owner", "--uid-owner", fmt.Sprint(a.uid),
					"-p", proto, "-m", "multiport", "--dports", b.raftPort+","+b.gossipPort+","+b.adminAddr[strings.LastIndexByte(b.adminAddr, ':')+1:],
					"-j", "DROP"); err != nil {
					return err
				}
			}
		}
	}
	c.mu.Lock()
	for _, id := range small {
		c.isolated[id] = true
	}
	c.mu.Unlock()
	return nil
}

func (c *cluster) heal() error {
	err := iptables("-F", chain)
	now := time.Now()
	c.mu.Lock()
	for id := range c.isolated {
		if p := c.byID(id); p != nil && p.running && !p.paused {
			p.liveSince = now
		}
	}
	c.isolated = map[string]bool{}
	c.mu.Unlock()
	return err
}

// httpGet is a GET with a short timeout: the status and body, 0 on error.
func httpGet(url string) (int, []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), httpWait)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// httpPost is a POST with no body and a generous timeout.
func httpPost(url string) (int, []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
