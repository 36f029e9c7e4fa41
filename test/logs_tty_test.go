//go:build linux

package test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-proxy/tether/test/testutil"
)

// openPTY opens a pseudo-terminal: the test reads the master, the process
// writes to the slave as to a terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatalf("open pty slave: %v", err)
	}
	return m, s
}

// TestAgentLogsTextOnATerminalAndJSONOtherwise: --log-format auto, the
// default, writes key=value text when stderr is a terminal (a person reads
// it, as with Consul or rqlite) and JSON lines when it is not.
func TestAgentLogsTextOnATerminalAndJSONOtherwise(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "tether.json")
	testutil.WriteFile(t, cfg, configFor(catchAll, testutil.NewBackend(t, "b1")))
	args := []string{"agent", "--config", cfg, "--node-id", "e2e", "--data-dir", t.TempDir(), "--admin-addr", "127.0.0.1:0", "--no-access-log"}

	m, s := openPTY(t)
	defer m.Close()
	cmd := exec.Command(tetherBin, args...)
	cmd.Env = os.Environ()
	cmd.Stderr = s
	out := &testutil.SyncBuffer{}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	tty := &testutil.SyncBuffer{}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, err := io.Copy(tty, m)
		if err != nil && !errors.Is(err, syscall.EIO) { // EIO: the last writer closed the slave
			t.Logf("reading the terminal: %v", err)
		}
	}()
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}()
	testutil.Eventually(t, 60*time.Second, "node started, on the terminal", func() bool {
		return strings.Contains(tty.String(), `msg="node started"`)
	})
	if strings.Contains(tty.String(), `{"time"`) {
		t.Fatalf("JSON lines on a terminal:\n%s", tty.String())
	}
	cmd.Process.Signal(syscall.SIGTERM)
	<-exited
	select {
	case <-copied:
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal was not closed after the agent exited")
	}
	if !strings.Contains(tty.String(), `msg="node stopped"`) {
		t.Fatalf("no stop line on the terminal:\n%s", tty.String())
	}

	// The same flags with stderr a pipe: JSON, the default of every
	// other test here.
	p := start(t, nil, args...)
	p.WaitLogLine("node started", 60*time.Second)
	p.Signal(syscall.SIGTERM)
	p.Wait(30 * time.Second)
}
