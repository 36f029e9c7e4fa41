package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/proxy/frontdoor"
	"github.com/tether-proxy/tether/test/testutil"
)

var _ frontdoor.TicketKeySource = (*keyring.Ring)(nil)

// httpsClusterConfig rewrites tc's config so that its listener serves HTTPS
// with one certificate for 127.0.0.1, as every node of a cluster would, and
// returns a pool that trusts it.
func httpsClusterConfig(t *testing.T, tc *testCluster) *x509.CertPool {
	t.Helper()
	certPEM, keyPEM, leaf := testutil.SelfSignedCert(t)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	certFile, keyFile := filepath.Join(tc.dir, "cert.pem"), filepath.Join(tc.dir, "key.pem")
	os.WriteFile(certFile, certPEM, 0o600)
	os.WriteFile(keyFile, keyPEM, 0o600)
	cfg, err := os.ReadFile(tc.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	https := fmt.Sprintf(`{ "Address": "127.0.0.1:0", "Certificate": { "Path": %q, "KeyPath": %q } }`, certFile, keyFile)
	os.WriteFile(tc.cfgPath, []byte(strings.Replace(string(cfg), `{ "Address": "127.0.0.1:0" }`, https, 1)), 0o600)
	return pool
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
	waitTicketSeeds(t, nodes)
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

func tlsResumed(t *testing.T, n *Node, pool *x509.CertPool, version uint16, held *testutil.HeldSession) bool {
	t.Helper()
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{
			RootCAs: pool, ServerName: "127.0.0.1", ClientSessionCache: held,
			MinVersion: version, MaxVersion: version,
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + n.ProxyAddrs()[0].String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Reading the body reads TLS 1.3's tickets, which follow the handshake.
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	if !held.Held() {
		t.Fatalf("%s gave no session ticket", n.ID())
	}
	return resp.TLS.DidResume
}

// waitTicketSeeds waits until every node holds the seed of the day its
// tickets seal under, and the same one: a node issues no ticket before.
func waitTicketSeeds(t *testing.T, nodes []*Node) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "every node seals tickets under the same seed of the day", func() bool {
		var want keyring.TicketSeed
		for i, n := range nodes {
			day := keyring.TicketDay(n.seeder.Time(time.Now()).Add(-keyring.TicketKeyGrace))
			seed, ok := sealingSeed(n, day)
			if !ok || (i > 0 && seed != want) {
				return false
			}
			want = seed
		}
		return true
	})
}

// sealingSeed is the seed n seals day's tickets under.
func sealingSeed(n *Node, day int64) (keyring.TicketSeed, bool) {
	for _, d := range n.seeds.Days() {
		if d.Day == day {
			return d.Seeds[0], true
		}
	}
	return keyring.TicketSeed{}, false
}

// setTicketTime makes every node's session tickets go by the time at
// (counting on from it).
func setTicketTime(nodes []*Node, at time.Time) {
	for _, n := range nodes {
		n.ticketShift.Store(int64(time.Until(at)))
	}
}

// Session ticket keys are derived per day from the keyring: a ticket
// resumes on every node across a day boundary, and not beyond seven days
// after its day began, whatever key the keyring holds; a revoked key ends
// its tickets at once.
func TestClusterTLSTicketKeysRotateDailyAndEndAfterSevenDays(t *testing.T) {
	tc := newTestCluster(t, 1)
	pool := httpsClusterConfig(t, tc)
	nodes := tc.form(3)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	t.Cleanup(func() { setTicketTime(nodes, time.Now()) })

	for _, v := range []struct {
		desc    string
		version uint16
	}{{"TLS 1.2", tls.VersionTLS12}, {"TLS 1.3", tls.VersionTLS13}} {
		t.Run(v.desc, func(t *testing.T) {
			// D is a day's start (UTC) ahead of the keyring's keys, which
			// stay active for 90 days.
			day := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
			at := func(d time.Duration) { setTicketTime(nodes, day.Add(d)) }
			first, second := &testutil.HeldSession{}, &testutil.HeldSession{}
			steps := []struct {
				desc string
				at   time.Duration
				node *Node
				held *testutil.HeldSession
				want bool
			}{
				{"D 23:00: a full handshake on n1 gives the first ticket", 23 * time.Hour, n1, first, false},
				{"D 23:00: the first ticket resumes on n2", 23 * time.Hour, n2, first, true},
				{"D+1 01:00: after the day boundary the first ticket (yesterday's key) resumes on n3", 25 * time.Hour, n3, first, true},
				{"D+1 01:00: a full handshake on n1 gives the second ticket", 25 * time.Hour, n1, second, false},
				{"D+7 01:00: the second ticket, 6 days old, resumes on n2", 7*24*time.Hour + time.Hour, n2, second, true},
				{"D+7 01:00: the first ticket, from D, no longer resumes (its day key is past 7 days)", 7*24*time.Hour + time.Hour, n2, first, false},
				{"D+8 02:00: the second ticket, 7 days and 1 hour old, no longer resumes", 8*24*time.Hour + 2*time.Hour, n3, second, false},
			}
			for _, s := range steps {
				at(s.at)
				waitTicketSeeds(t, nodes)
				if got := tlsResumed(t, s.node, pool, v.version, s.held); got != s.want {
					t.Fatalf("%s: resumed %t, want %t", s.desc, got, s.want)
				}
			}
		})
	}

	t.Run("revoking the keyring key ends its tickets on every node at once", func(t *testing.T) {
		setTicketTime(nodes, time.Now())
		waitTicketSeeds(t, nodes)
		held := &testutil.HeldSession{}
		tlsResumed(t, n1, pool, tls.VersionTLS12, held)
		if !tlsResumed(t, n2, pool, tls.VersionTLS12, held) {
			t.Fatal("a fresh ticket of n1 did not resume on n2")
		}
		id := n1.ring.ActiveKeyID(time.Now())
		if status, body := adminWrite(t, tc.waitLeader(), "POST", "/v1/keyring/"+id+"/revoke", nil); status != 200 {
			t.Fatalf("revoke %s: %d %v", id, status, body)
		}
		for _, n := range nodes {
			testutil.Eventually(t, 10*time.Second, n.ID()+" applied the revocation", func() bool {
				for _, md := range n.ring.List(time.Now()) {
					if md.ID == id {
						return md.State.String() == "revoked"
					}
				}
				return false
			})
			if tlsResumed(t, n, pool, tls.VersionTLS12, held) {
				t.Fatalf("%s resumed a ticket sealed under revoked key %s", n.ID(), id)
			}
		}
	})
}

// Ticket keys go by the cluster time (the members' median clock), not by a
// node's own clock: a node whose clock jumped days ahead seals tickets the
// others open, and opens theirs.
func TestClusterTLSTicketsGoByTheClusterTimeNotANodesClock(t *testing.T) {
	tc := newTestCluster(t, 1)
	pool := httpsClusterConfig(t, tc)
	nodes := tc.form(3)
	n1, n2 := nodes[0], nodes[1]
	setClock(n1, 50*time.Hour)
	t.Cleanup(func() { setClock(n1, 0) })
	testutil.Eventually(t, 10*time.Second, "n1 reads its clock 50 hours off the cluster time", func() bool {
		return n1.clock.Offset() > 49*time.Hour
	})
	if d := n1.seeder.Time(time.Now()).Sub(n2.seeder.Time(time.Now())); d > 5*time.Second || d < -5*time.Second {
		t.Fatalf("n1's ticket time is %s off n2's, want the same cluster time", d)
	}
	waitTicketSeeds(t, nodes)
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		for _, p := range [][2]*Node{{n1, n2}, {n2, n1}} {
			held := &testutil.HeldSession{}
			tlsResumed(t, p[0], pool, v, held)
			if !tlsResumed(t, p[1], pool, v, held) {
				t.Errorf("TLS %x: a ticket of %s did not resume on %s", v, p[0].ID(), p[1].ID())
			}
		}
	}
}
