package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

const label = "tether-e2e"

func image() string {
	if v := os.Getenv("TETHER_IMAGE"); v != "" {
		return v
	}
	return "tether:dev"
}

func backendImage() string {
	if v := os.Getenv("TETHER_BACKEND_IMAGE"); v != "" {
		return v
	}
	return "tether-demo-backend:dev"
}

// requireDocker skips under -short or unless TETHER_E2E_DOCKER is set, and
// fails when it is set but the engine or the images are missing: CI must
// not pass silently.
func requireDocker(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("Docker end-to-end test: not under -short")
	}
	if os.Getenv("TETHER_E2E_DOCKER") == "" {
		t.Skip("Docker end-to-end test: set TETHER_E2E_DOCKER=1 (make e2e-docker builds the images and runs them)")
	}
	if _, err := run(t, 30*time.Second, "docker", "version", "--format", "{{.Server.Version}}"); err != nil {
		t.Fatalf("TETHER_E2E_DOCKER is set but the Docker engine does not answer: %v", err)
	}
	for _, img := range []string{image(), backendImage()} {
		if _, err := run(t, 30*time.Second, "docker", "image", "inspect", img); err != nil {
			t.Fatalf("image %s is missing: run `make docker` first (%v)", img, err)
		}
	}
}

// run runs a command with a bound on its time and returns its stdout.
func run(t *testing.T, timeout time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

func must(t *testing.T, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	out, err := run(t, timeout, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// env is one test's Docker network with its secrets and config.
type env struct {
	t       *testing.T
	prefix  string // container names start with it
	network string // backends, clients (the host) and, without peers, the nodes' own traffic
	peers   string // when set: the nodes' gossip and Raft network (alias tether), so a test can cut it alone
	subnet  string // the peer network's first three octets: node i advertises subnet.(10+i)
	dir     string // secrets and config, bind-mounted read-only
	token   string
	nodes   map[string]*container
	volumes []string
	http    *http.Client
}

type container struct {
	name string // docker name
	host string // host name, node id, network alias
	ip   string
	// adminAddr, proxyAddr: host:port published on the host, when the
	// container is reached through them (Compose) instead of its IP.
	adminAddr, proxyAddr string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	requireDocker(t)
	// TETHER_E2E_RUN (set by make e2e-docker) starts every name of one run,
	// so its cleanup.sh finds what a killed run left and nothing else.
	e := &env{t: t, prefix: "te2e-" + os.Getenv("TETHER_E2E_RUN") + randHex(3), token: randHex(16), nodes: map[string]*container{},
		http: &http.Client{Timeout: 5 * time.Second}}
	e.network = e.prefix
	// The containers' user (65534) must read the bind-mounted files.
	dir, err := os.MkdirTemp("", "tether-docker-")
	if err != nil {
		t.Fatal(err)
	}
	e.dir = dir
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.write("cluster-secret", randHex(32))
	e.write("admin-token", e.token)
	must(t, 60*time.Second, "docker", "network", "create", "--label", label, e.network)
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range e.nodes {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				logs, _ := exec.CommandContext(ctx, "docker", "logs", "--tail", "40", c.name).CombinedOutput()
				cancel()
				t.Logf("--- %s logs:\n%s", c.host, logs)
			}
		}
		ids, _ := run(t, 60*time.Second, "docker", "ps", "-aq", "--filter", "name=^"+e.prefix)
		if ids != "" {
			_, _ = run(t, 120*time.Second, "docker", append([]string{"rm", "-f", "-v"}, strings.Fields(ids)...)...)
		}
		if len(e.volumes) > 0 {
			_, _ = run(t, 60*time.Second, "docker", append([]string{"volume", "rm", "-f"}, e.volumes...)...)
		}
		_, _ = run(t, 60*time.Second, "docker", "network", "rm", e.network)
		if e.peers != "" {
			_, _ = run(t, 60*time.Second, "docker", "network", "rm", e.peers)
		}
		os.RemoveAll(e.dir)
	})
	return e
}

func (e *env) write(name, content string) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.dir, name), []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// backends starts n demo backends b1..bn and writes a config routing to
// them with Cookie affinity.
func (e *env) backends(n int) []string {
	e.t.Helper()
	var names, dests []string
	for i := 1; i <= n; i++ {
		h := fmt.Sprintf("b%d", i)
		e.runContainer(h, []string{"-e", "BACKEND_NAME=" + h}, backendImage())
		names = append(names, h)
		dests = append(dests, fmt.Sprintf(`%q: {"Address": "http://%s:8080/"}`, h, h))
	}
	e.write("tether.json", `{
  "Listeners": [{"Address": ":8080"}],
  "ReverseProxy": {
    "Routes": {"all": {"ClusterId": "app", "Match": {"Path": "{**catch-all}"}}},
    "Clusters": {"app": {
      "SessionAffinity": {"Enabled": true, "Policy": "Cookie", "AffinityKeyName": ".Tether.Affinity"},
      "HealthCheck": {"Active": {"Enabled": true, "Interval": "00:00:01", "Timeout": "00:00:01", "Path": "/healthz"}},
      "Destinations": {`+strings.Join(dests, ", ")+`}}}
  }
}`)
	return names
}

// nodeArgs are every node's flags: identical, as the docs say.
func nodeArgs() []string {
	return []string{"agent", "--config=/etc/tether/tether.json", "--data-dir=/var/lib/tether",
		"--admin-addr=0.0.0.0:9901", "--join=tether", "--bootstrap-expect=3",
		"--cluster-secret-file=/run/secrets/cluster-secret", "--admin-token-file=/run/secrets/admin-token",
		"--no-access-log"}
}

// startNode runs a tether node named host; its data dir is a named volume
// kept across restarts of the container.
func (e *env) startNode(host string) *container {
	e.t.Helper()
	advertise := host
	if e.peers != "" {
		advertise = fmt.Sprintf("%s.%d", e.subnet, 10+len(e.nodes))
	}
	opts := []string{
		"--network-alias", "tether", // on the peer network when there is one
		"-e", "TETHER_ADVERTISE=" + advertise,
		"-v", e.dir + "/tether.json:/etc/tether/tether.json:ro",
		"-v", e.dir + "/cluster-secret:/run/secrets/cluster-secret:ro",
		"-v", e.dir + "/admin-token:/run/secrets/admin-token:ro",
		"-v", e.prefix + "-" + host + ":/var/lib/tether",
		"--label", label + ".volume=" + e.prefix + "-" + host,
	}
	var c *container
	if e.peers == "" {
		c = e.runContainer(host, opts, image(), nodeArgs()...)
	} else {
		// Peers reach it by its names on the peer network only; the host and
		// the backends on e.network.
		// Each advertises its fixed address on the peer network, so no
		// peer traffic can take the other network.
		c = &container{name: e.prefix + "-" + host, host: host}
		a := append([]string{"run", "-d", "--name", c.name, "--hostname", host, "--network", e.peers, "--ip", advertise,
			"--network-alias", host, "--label", label}, opts...)
		must(e.t, 120*time.Second, "docker", append(append(a, image()), nodeArgs()...)...)
		must(e.t, 60*time.Second, "docker", "network", "connect", e.network, c.name)
		c.ip = e.ipOf(c)
	}
	e.nodes[host] = c
	e.volumes = append(e.volumes, e.prefix+"-"+host)
	return c
}

func (e *env) runContainer(host string, opts []string, img string, args ...string) *container {
	e.t.Helper()
	c := &container{name: e.prefix + "-" + host, host: host}
	a := append([]string{"run", "-d", "--name", c.name, "--hostname", host, "--network", e.network,
		"--network-alias", host, "--label", label}, opts...)
	a = append(a, img)
	a = append(a, args...)
	must(e.t, 120*time.Second, "docker", a...)
	c.ip = e.ipOf(c)
	return c
}

func (e *env) ipOf(c *container) string {
	e.t.Helper()
	return must(e.t, 60*time.Second, "docker", "inspect", "-f", `{{(index .NetworkSettings.Networks "`+e.network+`").IPAddress}}`, c.name)
}

func (c *container) proxy() string {
	if c.proxyAddr != "" {
		return "http://" + c.proxyAddr
	}
	return "http://" + c.ip + ":8080"
}

func (c *container) admin() string {
	if c.adminAddr != "" {
		return "http://" + c.adminAddr
	}
	return "http://" + c.ip + ":9901"
}

// status is a node's /v1/status.
type status struct {
	NodeID    string `json:"node_id"`
	RaftState string `json:"raft_state"`
	LeaderID  string `json:"leader_id"`
}

type member struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Raft  string `json:"raft"`
}

func (e *env) adminGet(c *container, path string, v any) error {
	req, _ := http.NewRequest(http.MethodGet, c.admin()+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := e.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return json.Unmarshal(b, v)
}

func (e *env) adminPost(c *container, path string) (int, string, error) {
	req, _ := http.NewRequest(http.MethodPost, c.admin()+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := e.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func (e *env) status(c *container) (status, error) {
	var s status
	err := e.adminGet(c, "/v1/status", &s)
	return s, err
}

func (e *env) members(c *container) ([]member, error) {
	var m struct {
		Members []member `json:"members"`
	}
	err := e.adminGet(c, "/v1/members", &m)
	return m.Members, err
}

// waitFormed waits until every given node is ready, agrees on one leader
// among them, and lists want voters.
func (e *env) waitFormed(timeout time.Duration, want int, nodes ...*container) string {
	e.t.Helper()
	var leader string
	testutil.Eventually(e.t, timeout, fmt.Sprintf("%d nodes agree on a leader with %d voters", len(nodes), want), func() bool {
		leader = ""
		for _, c := range nodes {
			s, err := e.status(c)
			if err != nil || s.LeaderID == "" || (leader != "" && s.LeaderID != leader) {
				return false
			}
			leader = s.LeaderID
			if resp, err := e.http.Get(c.admin() + "/readyz"); err != nil {
				return false
			} else {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return false
				}
			}
		}
		ms, err := e.members(nodes[0])
		if err != nil {
			return false
		}
		voters := 0
		for _, m := range ms {
			if m.Raft == "voter" && m.State == "alive" {
				voters++
			}
		}
		return voters == want
	})
	return leader
}

// figure prints one measured figure in a form make e2e-docker greps.
func figure(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf("FIGURE %s: ", t.Name()) + fmt.Sprintf(format, args...)
	t.Log(msg)
	fmt.Println(msg)
}
