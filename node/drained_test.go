package node

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	demobackend "github.com/tether-proxy/tether/node/demo/backend"
	"github.com/tether-proxy/tether/test/testutil"
)

// A drain past its deadline reads as drained, since the deadline, on the
// API and in the events, until it is undone.
func TestDrainPastItsDeadlineReadsAsDrained(t *testing.T) {
	backend := httptest.NewServer(demobackend.Handler("b"))
	t.Cleanup(backend.Close)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "tether.json")
	cfg := fmt.Sprintf(`{
	  "Listeners": [ { "Address": "127.0.0.1:0" } ],
	  "ReverseProxy": {
	    "Routes": { "all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } } },
	    "Clusters": { "app": { "DrainTimeout": "00:00:01",
	      "Destinations": { "d1": { "Address": "%s/" }, "d2": { "Address": "%s/" } } } }
	  }
	}`, backend.URL, backend.URL)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := New(Config{ConfigPath: cfgPath, NodeID: "t1", DataDir: filepath.Join(dir, "data"), AdminAddr: "127.0.0.1:0", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	testutil.Eventually(t, 10*time.Second, "ready", func() bool { st, _ := admin(t, n, "GET", "/readyz", nil); return st == 200 })
	events, _ := openEvents(t, n, "", "")

	status, body := adminWrite(t, n, "POST", "/v1/clusters/app/destinations/d1/drain", nil)
	if status != 200 || body["draining"] != true {
		t.Fatalf("drain: %d %v", status, body)
	}
	deadline := body["drain_deadline"]
	cases := []struct {
		desc  string
		check func(d map[string]any) bool
	}{
		{desc: "before the deadline: draining until it", check: func(d map[string]any) bool {
			return d["draining"] == true && d["drain_state"] == "draining" && d["drain_deadline"] == deadline && d["drained_since"] == nil
		}},
		{desc: "past the deadline: drained since it", check: func(d map[string]any) bool {
			return d["draining"] == false && d["drain_state"] == "drained" && d["drained_since"] == deadline && d["drain_deadline"] == nil
		}},
	}
	for i, c := range cases {
		var last map[string]any
		if i == 0 {
			last = drainOf(t, n, "d1")
			if !c.check(last) && time.Now().Before(parseTime(t, deadline)) {
				t.Fatalf("%s: %v", c.desc, last)
			}
			continue
		}
		testutil.Eventually(t, 10*time.Second, c.desc, func() bool { last = drainOf(t, n, "d1"); return c.check(last) })
	}
	events.next(t, "drain draining", func(e sseEvent) bool { return e.typ == EventDrain && e.ev.Data["state"] == "draining" })
	e := events.next(t, "drain drained", func(e sseEvent) bool { return e.typ == EventDrain && e.ev.Data["state"] == "drained" })
	if e.ev.Data["since"] != deadline || e.ev.Data["draining"] != false {
		t.Fatalf("drained event %v, want since %v", e.ev.Data, deadline)
	}
	if d := drainOf(t, n, "d2"); d["drain_state"] != "none" || d["draining"] != false {
		t.Fatalf("d2 never drained: %v", d)
	}
	if status, _ := admin(t, n, "DELETE", "/v1/clusters/app/destinations/d1/drain", nil); status != 200 {
		t.Fatalf("undrain: %d", status)
	}
	if d := drainOf(t, n, "d1"); d["drain_state"] != "none" || d["drained_since"] != nil {
		t.Fatalf("after undrain: %v", d)
	}
	events.next(t, "drain undrained", func(e sseEvent) bool { return e.typ == EventDrain && e.ev.Data["state"] == "undrained" })
}

func parseTime(t *testing.T, v any) time.Time {
	t.Helper()
	s, _ := v.(string)
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("time %v: %v", v, err)
	}
	return tm
}
