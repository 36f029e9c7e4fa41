package node

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/node/leader"
	"github.com/tether-proxy/tether/store"
	"github.com/tether-proxy/tether/test/testutil"
)

// acmeNode starts a node of its own whose HTTPS listener asks the ACME
// directory at dirURL (trusting caFile) for domain; commands, when set,
// is the Raft command set the node applies.
func acmeNode(t *testing.T, dirURL, caFile, domain string, commands store.CommandSet) *Node {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "tether.json")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`{
	  "Listeners": [ { "Address": "127.0.0.1:0" },
	    { "Address": "127.0.0.1:0", "Acme": { "Directory": %q, "Domains": [%q], "CA": %q } } ],
	  "ReverseProxy": { "Routes": {}, "Clusters": {} }
	}`, dirURL, domain, caFile)), 0o600)
	n, err := New(Config{ConfigPath: cfgPath, NodeID: "a1", DataDir: filepath.Join(dir, "data"), AdminAddr: "127.0.0.1:0", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	n.commands = commands
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return n
}

func TestAcmeFailedOrderKeepsTheCertificateAndShowsInStatusMetricsAndEvents(t *testing.T) {
	ca := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	t.Cleanup(ca.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate().Raw}), 0o600)
	const domain = "www.tether.test"
	n := acmeNode(t, ca.URL+"/dir", caFile, domain, "")

	// A certificate obtained earlier, as the replicated state holds it.
	certPEM, keyPEM, leaf := testutil.SelfSignedCert(t, domain)
	rec := leader.AcmeCertRecord{Name: n.acmeBlocks()[0].Name(), Domains: []string{domain}, ChainPEM: certPEM, KeyPEM: keyPEM,
		NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter}
	b, _ := json.Marshal(rec)
	if _, err := n.store.Apply(store.AcmeWrite{Put: []store.AcmeEntry{{Name: leader.AcmeCertPrefix + leader.AcmeID(rec.Name), Secret: true, Value: b}}}); err != nil {
		t.Fatal(err)
	}

	var st leader.AcmeStatus
	testutil.Eventually(t, 10*time.Second, "the failed order in the status", func() bool {
		s := n.lead.AcmeView().Statuses()
		if len(s) != 1 || s[0].Failures == 0 {
			return false
		}
		st = s[0]
		return true
	})
	if !strings.Contains(st.LastError, "503") || st.NextAttempt.Sub(st.LastAttempt) < 59*time.Second {
		t.Fatalf("status after a failure: %+v (want the CA's error and a retry a minute later)", st)
	}

	c, err := tls.Dial("tcp", n.ProxyAddrs()[1].String(), &tls.Config{ServerName: domain, InsecureSkipVerify: true}) //nolint:gosec // compared below
	if err != nil {
		t.Fatalf("after a failed order the listener serves nothing: %v", err)
	}
	got := c.ConnectionState().PeerCertificates[0]
	c.Close()
	if !got.Equal(leaf) {
		t.Fatal("after a failed order the listener serves another certificate than the one obtained before")
	}

	resp, err := http.Get("http://" + n.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`tether_acme_failures{domains="` + domain + `"} 1`, `tether_acme_orders_total{result="failure"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	var status struct {
		Acme []leader.AcmeStatus `json:"acme"`
	}
	resp, err = http.Get("http://" + n.AdminAddr().String() + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&status)
	resp.Body.Close()
	if len(status.Acme) != 1 || status.Acme[0].Failures != 1 {
		t.Errorf("GET /v1/status acme: %+v", status.Acme)
	}
	// A challenge left by an order whose leader stopped mid-way is dropped.
	if _, err := n.store.Apply(store.AcmeWrite{Put: []store.AcmeEntry{{Name: leader.AcmeHTTP01Prefix + "stale", Value: []byte("stale.thumb")}}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the stale challenge deleted", func() bool {
		_, ok := n.store.AcmeEntry(leader.AcmeHTTP01Prefix + "stale")
		return !ok
	})
	testutil.Eventually(t, 10*time.Second, "an acme event on the page's stream", func() bool {
		for _, e := range n.ev.bus.Recent() {
			if e.Type == leader.EventAcme && e.Data["result"] == "failed" {
				return true
			}
		}
		return false
	})
}

func metricsOf(t *testing.T, n *Node) string {
	t.Helper()
	resp, err := http.Get("http://" + n.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestAcmeOrderIsNotPlacedWhileTheStateCannotBeWritten(t *testing.T) {
	var hits atomic.Int64
	ca := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(ca.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate().Raw}), 0o600)
	// A binary that does not apply AcmeWrite (types 1-7 only): the gate
	// refuses the write, as it does while a member of the cluster lacks it.
	n := acmeNode(t, ca.URL+"/dir", caFile, "www.tether.test", "1111111")
	testutil.Eventually(t, 10*time.Second, "the order held", func() bool {
		return strings.Contains(metricsOf(t, n), `tether_acme_orders_total{result="held"} 1`)
	})
	if h := hits.Load(); h != 0 {
		t.Fatalf("the CA was asked %d times for what the cluster could not keep", h)
	}
	if st := n.lead.AcmeView().Statuses(); len(st) != 0 {
		t.Fatalf("status: %+v", st)
	}
}
