package docker

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// composeCmd is `docker compose` when the plugin is there, else the
// standalone docker-compose.
func composeCmd(t *testing.T) []string {
	t.Helper()
	if _, err := run(t, 30*time.Second, "docker", "compose", "version"); err == nil {
		return []string{"docker", "compose"}
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}
	}
	t.Fatal("neither `docker compose` nor docker-compose is installed")
	return nil
}

// deploy/compose.yaml as shipped: `up` gives a three-node cluster behind
// the alias `tether`, ready, serving with sticky sessions, admin and proxy
// published on 127.0.0.1 only.
func TestComposeUp(t *testing.T) {
	e := newEnv(t) // for the secrets, the token and the HTTP client
	compose := composeCmd(t)
	file, err := filepath.Abs("../../deploy/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	project := e.prefix + "c"
	base := append(compose[1:], "-f", file, "-p", project)
	c := func(timeout time.Duration, args ...string) (string, error) {
		cmd := exec.Command(compose[0], append(base, args...)...)
		cmd.Env = append(os.Environ(), "TETHER_SECRETS_DIR="+e.dir,
			"TETHER_PROXY_PORT_1=", "TETHER_PROXY_PORT_2=", "TETHER_PROXY_PORT_3=",
			"TETHER_ADMIN_PORT_1=", "TETHER_ADMIN_PORT_2=", "TETHER_ADMIN_PORT_3=")
		done := make(chan struct{})
		var out []byte
		var err error
		go func() { out, err = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-time.After(timeout):
			_ = cmd.Process.Kill()
			<-done
		}
		return strings.TrimSpace(string(out)), err
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := c(60*time.Second, "logs", "--tail", "30")
			t.Logf("compose logs:\n%s", out)
		}
		if out, err := c(180*time.Second, "down", "-v", "--remove-orphans"); err != nil {
			t.Logf("compose down: %v\n%s", err, out)
		}
	})
	t0 := time.Now()
	if out, err := c(300*time.Second, "up", "-d"); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}
	var nodes []*container
	for _, s := range []string{"tether-1", "tether-2", "tether-3"} {
		out, err := c(60*time.Second, "port", s, "9901")
		if err != nil || !strings.HasPrefix(out, "127.0.0.1:") {
			t.Fatalf("admin port of %s: %q %v (want published on 127.0.0.1 only)", s, out, err)
		}
		admin := out
		out, err = c(60*time.Second, "port", s, "8080")
		if err != nil || !strings.HasPrefix(out, "127.0.0.1:") {
			t.Fatalf("proxy port of %s: %q %v (want published on 127.0.0.1 only)", s, out, err)
		}
		nodes = append(nodes, &container{name: s, host: s, adminAddr: admin, proxyAddr: out})
	}
	leader := e.waitFormed(120*time.Second, 3, nodes...)
	e.waitServing(60*time.Second, nodes...)
	took := time.Since(t0)
	l := newLoad(e, nodes...)
	for i := 0; i < 50; i++ {
		var s session
		client := newClient()
		for k := 0; k < 4; k++ {
			l.do(client, &s)
		}
	}
	figure(t, "compose up -> 3 voters, leader %s, ready and serving in %.1f s; %s", leader, took.Seconds(), l.summary())
	if l.failed.Load() != 0 || l.broken.Load() != 0 {
		t.Fatalf("sessions through the published ports: %s", l.summary())
	}
}
