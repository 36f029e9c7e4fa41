package node

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// TestKeyringListSaysWhatAnInstalledKeyWaitsFor: an installed key carries a
// placeholder activation a day ahead; GET /v1/keyring says what will
// actually happen (here: every member holds it, so the leader's next round
// activates it).
func TestKeyringListSaysWhatAnInstalledKeyWaitsFor(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "tether.json")
	if err := os.WriteFile(cfgPath, []byte(testConfig("http://127.0.0.1:9/", "")), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := New(Config{ConfigPath: cfgPath, NodeID: "t1", DataDir: filepath.Join(dir, "data"), AdminAddr: "127.0.0.1:0", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	n.manualLeader = true // the test runs the leader's rounds: the key stays installed until it does
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	call := func(method, path string) map[string]any {
		req, _ := http.NewRequest(method, "http://"+n.AdminAddr().String()+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d %v", method, path, resp.StatusCode, m)
		}
		return m
	}
	testutil.Eventually(t, 10*time.Second, "the first key", func() bool {
		if n.store.IsLeader() {
			n.lead.Round(time.Now())
		}
		return n.ring.ActiveKeyID(time.Now()) != ""
	})
	id, _ := call("POST", "/v1/keyring/rotate")["id"].(string)
	var pending string
	testutil.Eventually(t, 10*time.Second, "the installed key held by every member", func() bool {
		for _, k := range call("GET", "/v1/keyring")["keys"].([]any) {
			if k := k.(map[string]any); k["id"] == id && k["state"] == "installed" {
				pending, _ = k["pending"].(string)
			}
		}
		return strings.HasPrefix(pending, "every member holds it")
	})
	// The leader's own snapshot of the key may still be on its way (no
	// wait worth naming): its next rounds activate the key.
	testutil.Eventually(t, 10*time.Second, "the leader's round activates the key", func() bool {
		n.lead.Round(time.Now())
		for _, k := range call("GET", "/v1/keyring")["keys"].([]any) {
			if k := k.(map[string]any); k["id"] == id {
				return k["state"] == "active" && k["pending"] == nil
			}
		}
		return false
	})
}
