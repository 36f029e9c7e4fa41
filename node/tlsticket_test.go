package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/proxy"
	"github.com/tether-proxy/tether/test/testutil"
)

var _ proxy.TicketKeySource = (*keyring.Ring)(nil)

// httpsClusterConfig rewrites tc's config so that its listener serves HTTPS
// with one certificate for 127.0.0.1, as every node of a cluster would.
func httpsClusterConfig(t *testing.T, tc *testCluster) {
	t.Helper()
	certPEM, keyPEM, _ := testutil.SelfSignedCert(t)
	certFile, keyFile := filepath.Join(tc.dir, "cert.pem"), filepath.Join(tc.dir, "key.pem")
	os.WriteFile(certFile, certPEM, 0o600)
	os.WriteFile(keyFile, keyPEM, 0o600)
	cfg, err := os.ReadFile(tc.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	https := fmt.Sprintf(`{ "Address": "127.0.0.1:0", "Certificate": { "Path": %q, "KeyPath": %q } }`, certFile, keyFile)
	os.WriteFile(tc.cfgPath, []byte(strings.Replace(string(cfg), `{ "Address": "127.0.0.1:0" }`, https, 1)), 0o600)
}

// opensslResumed connects to addr with openssl s_client at the given
// protocol version flag (-tls1_2, -tls1_3), offering the session in sessIn
// when set and saving the session to sessOut, and reports whether the
// session was resumed ("Reused") or new.
func opensslResumed(t *testing.T, addr, version, sessIn, sessOut string) bool {
	t.Helper()
	args := []string{"s_client", "-connect", addr, version, "-ign_eof", "-sess_out", sessOut}
	if sessIn != "" {
		args = append(args, "-sess_in", sessIn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "openssl", args...)
	// A whole request and response: TLS 1.3 tickets follow the handshake
	// and are read with the response.
	cmd.Stdin = strings.NewReader("GET / HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	switch s := string(out); {
	case strings.Contains(s, "\nReused, "):
		return true
	case strings.Contains(s, "\nNew, "):
		return false
	default:
		t.Fatalf("openssl %s: neither New nor Reused in:\n%s", strings.Join(args, " "), s)
	}
	return false
}

func TestClusterTLSSessionResumesOnAnotherNodeAndAcrossRotation(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("openssl is not installed: .ci/run installs it for this test")
		}
		t.Skip("openssl not installed: this test drives openssl s_client")
	}
	tc := newTestCluster(t, 1)
	httpsClusterConfig(t, tc)
	nodes := tc.form(3)
	addr := func(n *Node) string { return n.ProxyAddrs()[0].String() }

	// A node of another cluster (its own keyring) serving the same
	// certificate (not one of tc's nodes: it leads a cluster of its own).
	dir := t.TempDir()
	foreign, err := New(Config{ConfigPath: tc.cfgPath, NodeID: "foreign", DataDir: dir, AdminAddr: "127.0.0.1:0", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := foreign.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { foreign.Shutdown(context.Background()) })

	for _, version := range []string{"-tls1_2", "-tls1_3"} {
		t.Run(version, func(t *testing.T) {
			dir := t.TempDir()
			first, again := filepath.Join(dir, "first"), filepath.Join(dir, "again")
			if opensslResumed(t, addr(nodes[0]), version, "", first) {
				t.Fatal("a first connection was resumed")
			}
			for _, n := range nodes[1:] {
				if !opensslResumed(t, addr(n), version, first, again) {
					t.Fatalf("a ticket of %s did not resume on %s", nodes[0].ID(), n.ID())
				}
			}
			if opensslResumed(t, addr(foreign), version, first, again) {
				t.Fatal("a node of another cluster resumed the session: it cannot hold the key")
			}

			status, body := adminWrite(t, tc.waitLeader(), "POST", "/v1/keyring/rotate", nil)
			id, _ := body["id"].(string)
			if status != 200 || id == "" {
				t.Fatalf("rotate: %d %v", status, body)
			}
			testutil.Eventually(t, 15*time.Second, "the rotated key active on every node", func() bool {
				for _, n := range nodes {
					if n.ring.ActiveKeyID(time.Now()) != id {
						return false
					}
				}
				return true
			})
			for _, n := range nodes {
				if !opensslResumed(t, addr(n), version, first, again) {
					t.Fatalf("after a rotation a ticket issued before it did not resume on %s", n.ID())
				}
			}
			fresh := filepath.Join(dir, "fresh")
			opensslResumed(t, addr(nodes[2]), version, "", fresh)
			if !opensslResumed(t, addr(nodes[0]), version, fresh, again) {
				t.Fatalf("a ticket issued after the rotation by %s did not resume on %s", nodes[2].ID(), nodes[0].ID())
			}
		})
	}
}
