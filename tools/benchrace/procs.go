package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// command runs name with args, bounded by timeout, and returns its
// combined output.
func command(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// proc is a process the harness started; stop ends it and its children.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
}

// startProc starts argv pinned to cpu, in its own process group, output to
// logPath. With firstLine it returns the first line the process prints on
// stdout (the addresses it bound).
func startProc(name, cpu, logPath string, firstLine bool, env []string, argv ...string) (*proc, string, error) {
	args := append([]string{"-c", cpu}, argv...)
	cmd := exec.Command("taskset", args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	cmd.Stderr = logf
	var stdout io.Reader
	if firstLine {
		stdout, err = cmd.StdoutPipe()
		if err != nil {
			return nil, "", err
		}
	} else {
		cmd.Stdout = logf
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	if !firstLine {
		return p, "", nil
	}
	lines := make(chan string, 1)
	go func() {
		br := bufio.NewReader(stdout)
		l, _ := br.ReadString('\n')
		lines <- strings.TrimSpace(l)
		io.Copy(logf, br)
	}()
	select {
	case l := <-lines:
		if l == "" {
			p.stop()
			return nil, "", fmt.Errorf("%s printed no address (see %s)", name, logPath)
		}
		return p, l, nil
	case <-time.After(60 * time.Second):
		p.stop()
		return nil, "", fmt.Errorf("%s did not start within 60 s (see %s)", name, logPath)
	}
}

// pid is the process's pid: taskset execs the command, so it is the
// proxy's own.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop asks the process group to terminate, then kills it.
func (p *proc) stop() {
	if p == nil {
		return
	}
	p.stdin.Close()
	syscall.Kill(-p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
	}
}

// handedOut are the ports freePorts returned: a closed listener's port is
// free again at once, so a later call (before the first process bound it)
// could return it twice.
var handedOut = map[string]bool{}

// freePorts returns n loopback addresses nothing listens on now, each
// distinct from every address returned before.
func freePorts(n int) ([]string, error) {
	var out []string
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for len(out) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln) // held open until all n are chosen
		a := ln.Addr().String()
		if handedOut[a] {
			continue
		}
		handedOut[a] = true
		out = append(out, a)
	}
	return out, nil
}

// waitHTTP polls url until it answers (any status) or timeout passes.
func waitHTTP(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := c.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %v: %w", url, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sessionCookie sends one request without a cookie and returns the
// "name=value" of the Set-Cookie named name (the session's key), so the
// load runs on the affinity path with a valid key.
func sessionCookie(url, name string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	for _, ck := range resp.Cookies() {
		if ck.Name == name {
			return ck.Name + "=" + ck.Value, nil
		}
	}
	return "", fmt.Errorf("GET %s: no Set-Cookie %s (got %q)", url, name, resp.Header.Values("Set-Cookie"))
}

// sessionRouted checks that a request carrying cookie ck is answered 200
// without a new Set-Cookie: its session was valid there.
func sessionRouted(url, ck string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Cookie", ck)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(resp.Header.Values("Set-Cookie")) > 0 {
		return fmt.Errorf("GET %s with the session's cookie: %d, Set-Cookie %q (the session was not valid there)", url, resp.StatusCode, resp.Header.Values("Set-Cookie"))
	}
	return nil
}

// install installs the Debian packages of the tools that are missing.
func install() error {
	need := map[string]string{"haproxy": "haproxy", "nginx": "nginx", "caddy": "caddy", "wrk": "wrk", "h2load": "nghttp2-client", "taskset": "util-linux"}
	var pkgs []string
	for bin, pkg := range need {
		if _, err := exec.LookPath(bin); err != nil {
			if _, err := os.Stat(filepath.Join("/usr/sbin", bin)); err != nil {
				pkgs = append(pkgs, pkg)
			}
		}
	}
	if len(pkgs) == 0 {
		return nil
	}
	fmt.Fprintf(os.Stderr, "installing %s\n", strings.Join(pkgs, " "))
	if out, err := command(5*time.Minute, "apt-get", "update", "-qq"); err != nil {
		fmt.Fprintf(os.Stderr, "apt-get update: %v\n%s\n", err, out)
	}
	// One at a time: a package that cannot be installed skips its proxy
	// (or, for h2load, the h2c case), not the whole race.
	for _, pkg := range pkgs {
		cmd := exec.Command("apt-get", "install", "-y", "-qq", "--no-install-recommends", pkg)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "apt-get install %s failed (its proxy or case is skipped): %v\n%s\n", pkg, err, out)
		}
	}
	if _, err := lookBin("taskset"); err != nil {
		return errors.New("taskset (util-linux) is required to pin the proxies and the load")
	}
	if _, err := lookBin("wrk"); err != nil {
		return errors.New("wrk is required: apt-get install wrk")
	}
	return nil
}

// lookBin finds a tool in PATH or /usr/sbin (not in a non-root PATH).
func lookBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/sbin", name)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", errors.New(name + " not found")
}
