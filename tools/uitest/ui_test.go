package uitest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/tether-proxy/tether/test/testutil"
)

// chromiumPath finds the browser: $TETHER_CHROMIUM, else Debian's chromium
// or a Chrome on PATH.
func chromiumPath() string {
	for _, name := range []string{os.Getenv("TETHER_CHROMIUM"), "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

func uiConfig(backends ...*testutil.Backend) string {
	var dests []string
	for _, b := range backends {
		dests = append(dests, fmt.Sprintf(`"%s": { "Address": "%s/" }`, b.Name, b.URL()))
	}
	return fmt.Sprintf(`{
  "Listeners": [ { "Address": "127.0.0.1:0" } ],
  "Limits": { "ShutdownTimeout": "00:00:05" },
  "ReverseProxy": {
    "Routes": { %s },
    "Clusters": { "app": {
      "LoadBalancingPolicy": "RoundRobin",
      "SessionAffinity": { "Enabled": true, "Policy": "Cookie", "AffinityKeyName": ".Tether.Affinity" },
      "HealthCheck": { "Active": { "Enabled": true, "Interval": "00:00:01", "Timeout": "00:00:00.500",
                                   "Path": "/healthz", "ConsecutiveFailures": 1, "ProbeFanout": 2 } },
      "Destinations": { %s } } }
  }
}`, catchAll, strings.Join(dests, ", "))
}

// tokenJSON calls an admin endpoint with the bearer token.
func tokenJSON(t *testing.T, method, url, token string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// TestUIInARealBrowser drives the cluster page in Chromium against three
// agents: members and leader, a rotation and a drain started from the
// page, the page following its node through a restart, and a killed node
// turning suspect, then dead. Screenshots at 1280 and 390 px go to
// $TETHER_UI_SCREENSHOTS (make ui-screenshots: docs/img), else a temporary
// directory.
func TestUIInARealBrowser(t *testing.T) {
	browser := chromiumPath()
	if browser == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set and no chromium is installed: .ci/run installs it (apt-get install chromium); TETHER_CHROMIUM names another browser")
		}
		t.Skip("no chromium on PATH (apt-get install chromium, or TETHER_CHROMIUM=/path): the browser test needs one; with CI set this is a failure")
	}
	began := time.Now()
	const token = "ui-e2e-token-0123456789"
	b1, b2, b3 := testutil.NewBackend(t, "b1"), testutil.NewBackend(t, "b2"), testutil.NewBackend(t, "b3")
	e := testutil.NewCluster(t, tetherBin, uiConfig(b1, b2, b3), "a-ui-test-cluster-secret-0123456789abcdef")
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	testutil.WriteFile(t, tokenFile, token+"\n")

	// Fixed admin ports: the page's node comes back on its address.
	var nodes []*testutil.Agent
	var join []string
	for i := 1; i <= 3; i++ {
		extra := []string{"--bootstrap-expect", "3", "--admin-addr", testutil.FreeAddr(t), "--admin-token-file", tokenFile}
		if len(join) > 0 {
			extra = append(extra, "--join", strings.Join(join, ","))
		}
		a := e.StartNode(fmt.Sprintf("n%d", i), "", extra...)
		join = append(join, a.Gossip)
		nodes = append(nodes, a)
	}
	leaderOf := func(a *testutil.Agent) string {
		_, st := tokenJSON(t, "GET", a.AdminURL+"/v1/status", token)
		id, _ := st["leader_id"].(string)
		return id
	}
	for _, a := range nodes {
		testutil.Eventually(t, 60*time.Second, a.ID+" ready", func() bool {
			st, _, _ := testutil.Get(t, http.DefaultClient, a.AdminURL+"/readyz", nil)
			return st == 200
		})
	}
	leader := ""
	testutil.Eventually(t, 30*time.Second, "a leader all agree on", func() bool {
		leader = leaderOf(nodes[0])
		return leader != "" && leaderOf(nodes[1]) == leader && leaderOf(nodes[2]) == leader
	})
	// The page talks to a follower; the node killed later is the other one.
	var page, victim *testutil.Agent
	for _, a := range nodes {
		switch {
		case a.ID == leader:
		case page == nil:
			page = a
		default:
			victim = a
		}
	}
	t.Logf("cluster up in %v: leader %s, page on %s, victim %s", time.Since(began).Round(time.Millisecond), leader, page.ID, victim.ID)

	// The browser: one for the whole test, bounded; each step has its own
	// deadline below.
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.DisableGPU, chromedp.WindowSize(1280, 900))...)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	defer cancelCtx()
	var consoleMu sync.Mutex
	var exceptions, consoleLog []string
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			consoleMu.Lock()
			consoleLog = append(consoleLog, m.String())
			if m.IsException() {
				exceptions = append(exceptions, m.String())
			}
			consoleMu.Unlock()
		}
	}()
	// The viewer's zone: India (UTC+05:30, no DST) tells local time from
	// UTC. (ICU names it Asia/Calcutta.)
	const zone = "Asia/Kolkata"
	ist := time.FixedZone("IST", 5*3600+1800)
	if err := chromedp.Do(ctx,
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: zone})
			return err
		}),
		chromedp.Navigate(page.AdminURL+"/ui/"),
	); err != nil {
		t.Fatalf("opening the page in %s: %v", browser, err)
	}

	dumpPage := func() string {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := chromedp.Run(dctx, chromedp.Evaluate[string](`document.querySelector('#conn')?.outerHTML + '\n' + document.querySelector('main')?.innerText`))
		consoleMu.Lock()
		defer consoleMu.Unlock()
		return fmt.Sprintf("%s (err %v)\nconsole:\n%s", s, err, strings.Join(consoleLog, "\n"))
	}
	step := func(what string, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s (after %v): %v\npage:\n%s", what, time.Since(began).Round(time.Millisecond), err, dumpPage())
		}
	}
	// until polls a page predicate (a JavaScript expression).
	until := func(what string, timeout time.Duration, expr string) {
		t.Helper()
		step(what, timeout+5*time.Second, func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			_, err := chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout))(ctx, tg)
			return chromedp.Void{}, err
		})
	}
	eval := func(expr string) string {
		t.Helper()
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		s, err := chromedp.Run(ectx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("evaluating %s: %v", expr, err)
		}
		return s
	}
	member := func(id string) string {
		return fmt.Sprintf(`document.querySelector('#members tr[data-member="%s"]')`, id)
	}

	// 1. The page asks for the token once, keeps it in the tab, not a cookie.
	step("the token dialog", 30*time.Second,
		chromedp.WaitVisible(chromedp.CSS("#token-input")),
		chromedp.SendKeys(chromedp.CSS("#token-input"), token+kb.Enter),
	)
	until("live on "+page.ID, 30*time.Second, fmt.Sprintf(`document.querySelector('#conn').dataset.state === 'live' && document.querySelector('#conn').dataset.node === %q`, page.ID))
	if got := eval(`document.cookie + '|' + sessionStorage.getItem('tether.adminToken')`); got != "|"+token {
		t.Fatalf("cookies|sessionStorage = %q, want no cookie and the token in sessionStorage", got)
	}
	if txt := eval(`document.querySelector('#conn-text').textContent`); !strings.Contains(txt, "connected to "+page.ID) {
		t.Fatalf("the page does not say which node it is connected to: %q", txt)
	}

	// 2. Three members, all alive, and the leader.
	until("three alive members and the leader", 30*time.Second, fmt.Sprintf(
		`(() => { const rows = [...document.querySelectorAll('#members tbody tr[data-member]')];
		  return rows.length === 3 && rows.every(r => r.dataset.state === 'alive') &&
		    rows.filter(r => r.dataset.leader === 'true').map(r => r.dataset.member).join() === %q &&
		    document.querySelector('#leader').textContent === %q; })()`, leader, leader))

	// 3. Times in the viewer's zone.
	_, ring := tokenJSON(t, "GET", page.AdminURL+"/v1/keyring", token)
	first, _ := ring["active_key_id"].(string)
	created, _ := time.Parse(time.RFC3339Nano, ringKey(ring, first)["created"].(string))
	until("the key's creation in "+zone, 20*time.Second, fmt.Sprintf(
		`/Asia\/(Kolkata|Calcutta)/.test(document.querySelector('#zone').textContent) && (document.querySelector('#keys tr[data-key="%s"] time')?.textContent || '').includes(%q)`,
		first, created.In(ist).Format("15:04:05")))

	// 4. Traffic: the figures follow the stats events; every backend takes
	// new sessions; a session sealed to b1 is kept for the drain check.
	newSession := func(a *testutil.Agent) (backend, cookie string) {
		st, hdr, _ := testutil.Get(t, http.DefaultClient, a.ProxyURL+"/", nil)
		if st != 200 {
			t.Fatalf("new session through %s: %d", a.ID, st)
		}
		return hdr.Get("X-Demo-Backend"), strings.Split(hdr.Get("Set-Cookie"), ";")[0]
	}
	seen := map[string]int{}
	b1Cookie := ""
	for i := 0; i < 30; i++ {
		b, c := newSession(nodes[i%3])
		seen[b]++
		if b == "b1" && b1Cookie == "" {
			b1Cookie = c
		}
	}
	if seen["b1"] == 0 || b1Cookie == "" {
		t.Fatalf("b1 took no new session before the drain: %v", seen)
	}
	until("request figures on the page", 20*time.Second,
		`[...document.querySelectorAll('[data-stat="total"]')].some(e => parseInt(e.textContent.replace(/\D/g, '')) > 0) &&
		 parseInt(document.querySelector('[data-outcome="no_session"]').textContent.replace(/\D/g, '')) > 0`)

	// 5. Rotate from the page, by keyboard: focus, Enter, Tab to confirm.
	step("rotate by keyboard", 20*time.Second,
		chromedp.Focus(chromedp.CSS("#rotate")),
		chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.KeyEvent(kb.Tab),
		chromedp.KeyEvent(kb.Enter),
	)
	until("the rotation's key id", 20*time.Second, `!!document.querySelector('#rotate').dataset.lastKey`)
	rotated := eval(`document.querySelector('#rotate').dataset.lastKey`)
	if rotated == first {
		t.Fatalf("the rotation from the page returned the old key %s", rotated)
	}
	// Activation waits for every alive member to hold the key (≤ 10 s).
	until("the new key active on the page", 40*time.Second, fmt.Sprintf(
		`document.querySelector('#keys tr[data-key="%s"]')?.dataset.state === 'active' &&
		 document.querySelector('#keys tr[data-key="%s"]')?.dataset.state === 'inactive'`, rotated, first))
	if _, r := tokenJSON(t, "GET", victim.AdminURL+"/v1/keyring", token); r["active_key_id"] != rotated {
		// Every node applies the activation; the victim's view lags at most a moment.
		testutil.Eventually(t, 20*time.Second, "the new key active on "+victim.ID, func() bool {
			_, r := tokenJSON(t, "GET", victim.AdminURL+"/v1/keyring", token)
			return r["active_key_id"] == rotated
		})
	}

	// 6. A health flip shows, told by text.
	b3.Sick.Store(true)
	until("b3 unhealthy cluster-wide on the page", 30*time.Second,
		`document.querySelector('tr[data-dest="b3"] td[data-label="Cluster health"] .state')?.textContent === 'unhealthy' &&
		 !!document.querySelector('#events li[data-type="health"][data-id="b3"][data-state="unhealthy"]')`)

	// 7. Drain b1 from the page: no new session goes to it on any node,
	// its existing session stays.
	step("drain b1", 20*time.Second,
		chromedp.Click(chromedp.CSS(`tr[data-dest="b1"] button[data-action="drain"]`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
	)
	until("b1 draining on the page", 20*time.Second,
		`document.querySelector('tr[data-dest="b1"]')?.dataset.draining === 'true' &&
		 document.querySelector('tr[data-dest="b1"] td[data-label="Draining"]').textContent.includes('until') &&
		 !!document.querySelector('#events li[data-type="drain"][data-state="draining"]')`)
	for _, a := range nodes {
		testutil.Eventually(t, 20*time.Second, "b1 draining on "+a.ID, func() bool {
			_, d := tokenJSON(t, "GET", a.AdminURL+"/v1/clusters/app/destinations", token)
			ds, _ := d["destinations"].([]any)
			for _, x := range ds {
				if x := x.(map[string]any); x["id"] == "b1" {
					return x["draining"] == true
				}
			}
			return false
		})
	}
	for i := 0; i < 30; i++ {
		if b, _ := newSession(nodes[i%3]); b == "b1" {
			t.Fatalf("new session %d went to the draining b1 through %s", i, nodes[i%3].ID)
		}
	}
	for _, a := range nodes {
		if _, hdr, _ := testutil.Get(t, http.DefaultClient, a.ProxyURL+"/", map[string]string{"Cookie": b1Cookie}); hdr.Get("X-Demo-Backend") != "b1" {
			t.Fatalf("b1's existing session moved to %q through %s during the drain", hdr.Get("X-Demo-Backend"), a.ID)
		}
	}

	// The indexes move without a change event (stats carry them).
	testutil.Eventually(t, 20*time.Second, "the page's applied and durable indexes those of the API", func() bool {
		_, st := tokenJSON(t, "GET", page.AdminURL+"/v1/status", token)
		_, ms := tokenJSON(t, "GET", page.AdminURL+"/v1/members", token)
		want := fmt.Sprintf("%v", st["applied_index"])
		for _, m := range ms["members"].([]any) {
			want += fmt.Sprintf(" %v", m.(map[string]any)["durable_index"])
		}
		return eval(`[document.querySelector('#applied'), ...document.querySelectorAll('#members [data-stat="durable"]')].map(e => e.textContent.replace(/\D/g, '')).join(' ')`) == want
	})

	// 8. Screenshots at both widths.
	dir := os.Getenv("TETHER_UI_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "tether-ui-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The drain's notice is dismissed (by its button) so it hides nothing.
	step("dismiss the notice", 10*time.Second, chromedp.Click(chromedp.CSS("#toast-close")),
		chromedp.WaitNotVisible(chromedp.CSS("#toast")))
	for _, w := range []int64{1280, 390} {
		height := int64(900)
		if w == 390 {
			height = 844
		}
		var png []byte
		step(fmt.Sprintf("screenshot at %d px", w), 30*time.Second,
			chromedp.EmulateViewport(w, height),
			chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				// A frame after the resize, so the layout is the new one.
				_, err := chromedp.Poll[chromedp.Void](fmt.Sprintf(`window.innerWidth === %d`, w), chromedp.WithPollingTimeout(10*time.Second))(ctx, tg)
				return err
			}),
			chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				var err error
				png, err = chromedp.FullScreenshot(100)(ctx, tg)
				return err
			}),
		)
		if w == 390 {
			// Readable on a phone: nothing wider than the screen.
			if sw := eval(`String(document.documentElement.scrollWidth)`); sw != "390" {
				t.Errorf("at 390 px the page is %s px wide", sw)
			}
		}
		path := filepath.Join(dir, fmt.Sprintf("ui-%d.png", w))
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s (%d bytes)", path, len(png))
	}
	step("back to 1280 px", 10*time.Second, chromedp.EmulateViewport(1280, 900))

	// 9. The page's node restarts: the page says so, and reconnects.
	boot := eval(`document.querySelector('#conn').dataset.boot`)
	page.Signal(syscall.SIGTERM)
	if code := page.Wait(30 * time.Second); code != 0 {
		t.Fatalf("%s exited %d on SIGTERM", page.ID, code)
	}
	until("reconnecting while "+page.ID+" is down", 20*time.Second, `document.querySelector('#conn').dataset.state === 'reconnecting'`)
	page = e.StartNode(page.ID, page.DataDir, page.Extra...)
	until("live again on the restarted "+page.ID, 60*time.Second, fmt.Sprintf(
		`document.querySelector('#conn').dataset.state === 'live' && document.querySelector('#conn').dataset.boot !== %q && document.querySelector('#conn').dataset.node === %q &&
		 !document.querySelector('#token-dialog').open`, boot, page.ID)) // the token was asked for once
	// The table may still show the rows from before the restart: the
	// page's node itself must see the three alive before the kill below.
	testutil.Eventually(t, 40*time.Second, page.ID+" sees three alive members after its restart", func() bool {
		_, body := tokenJSON(t, "GET", page.AdminURL+"/v1/members", token)
		ms, _ := body["members"].([]any)
		alive := 0
		for _, m := range ms {
			if mm, _ := m.(map[string]any); mm["state"] == "alive" {
				alive++
			}
		}
		return alive == 3
	})
	until("three alive members after the restart", 40*time.Second,
		`(() => { const rows = [...document.querySelectorAll('#members tbody tr[data-member]')];
		  return rows.length === 3 && rows.every(r => r.dataset.state === 'alive'); })()`)

	// 10. Kill a node: suspect, then dead, within gossip's timeouts
	// (LAN: suspect after a failed probe, dead 3 to 9 s later).
	killed := time.Now()
	if err := victim.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	until(victim.ID+" suspect", 30*time.Second, fmt.Sprintf(
		`%s?.dataset.state === 'suspect' || !!document.querySelector('#events li[data-type="member"][data-id="%s"][data-state="suspect"]')`, member(victim.ID), victim.ID))
	suspectAfter := time.Since(killed)
	until(victim.ID+" dead", 40*time.Second, fmt.Sprintf(`%s?.dataset.state === 'dead'`, member(victim.ID)))
	t.Logf("%s killed: suspect on the page after %v, dead after %v; test ran %v",
		victim.ID, suspectAfter.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	if txt := eval(fmt.Sprintf(`%s.querySelector('td[data-label="Gossip"]').textContent`, member(victim.ID))); !strings.Contains(txt, "dead") {
		t.Fatalf("the dead member's state is not told in text: %q", txt)
	}

	consoleMu.Lock()
	defer consoleMu.Unlock()
	if len(exceptions) > 0 {
		t.Fatalf("the page threw:\n%s", strings.Join(exceptions, "\n"))
	}
}

// ringKey is the key with id in a /v1/keyring answer.
func ringKey(ring map[string]any, id string) map[string]any {
	keys, _ := ring["keys"].([]any)
	for _, k := range keys {
		if k := k.(map[string]any); k["id"] == id {
			return k
		}
	}
	return map[string]any{"created": ""}
}
