package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
)

// wafHarness is a harness whose WAF audit lines are captured.
type wafHarness struct {
	*harness
	be    *backend
	audit *bytes.Buffer
	amu   *sync.Mutex
}

func newWafHarness(t *testing.T, top, route string, h http.HandlerFunc) *wafHarness {
	t.Helper()
	be := newBackend(t, h)
	w := &wafHarness{be: be, audit: &bytes.Buffer{}, amu: &sync.Mutex{}}
	cfg := mustParse(t, simpleConfig(map[string]string{"d1": be.URL}, "", route, top))
	w.harness = newHarness(t, cfg, func(o *Options) {
		o.WafLog = slog.New(slog.NewJSONHandler(lockedWriter{w.amu, w.audit}, nil))
	})
	return w
}

func (w *wafHarness) auditLines(t *testing.T) []map[string]any {
	t.Helper()
	w.amu.Lock()
	defer w.amu.Unlock()
	return jsonLines(t, w.audit.Bytes())
}

func hasRule(line map[string]any, id float64) bool {
	ids, _ := line["rule_ids"].([]any)
	for _, v := range ids {
		if v == id {
			return true
		}
	}
	return false
}

func do(t *testing.T, method, u, ctype, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body = http.NoBody
	}
	req.Header.Set("User-Agent", "tether-test")
	req.Header.Set("Accept", "*/*")
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const sqli = "/?id=" + "1%27%20OR%20%271%27%3D%271%27%20UNION%20SELECT%20password%20FROM%20users--"

func TestWafModes(t *testing.T) {
	cases := []struct {
		desc        string
		top, route  string
		path        string
		wantStatus  int
		wantBackend bool
		wantAction  string // "" : no audit line
	}{
		{desc: "Prevention answers 403 to a threat and never reaches the backend",
			top: `"Waf": {"Mode": "Prevention"}`, path: sqli, wantStatus: 403, wantAction: "blocked"},
		{desc: "Detection forwards a threat and logs it",
			top: `"Waf": {"Mode": "Detection"}`, path: sqli, wantStatus: 200, wantBackend: true, wantAction: "detected"},
		{desc: "a clean request passes Prevention without an audit line",
			top: `"Waf": {"Mode": "Prevention"}`, path: "/products?id=42", wantStatus: 200, wantBackend: true},
		{desc: "Mode Off inspects nothing",
			top: `"Waf": {"Mode": "Off"}`, path: sqli, wantStatus: 200, wantBackend: true},
		{desc: "a route's WafPolicy Disabled turns the WAF off for it",
			top: `"Waf": {"Mode": "Prevention"}`, route: `"WafPolicy": {"Disabled": true}`, path: sqli, wantStatus: 200, wantBackend: true},
		{desc: "a route's WafPolicy Detection overrides the site's Prevention",
			top: `"Waf": {"Mode": "Prevention"}`, route: `"WafPolicy": {"Mode": "Detection"}`, path: sqli, wantStatus: 200, wantBackend: true, wantAction: "detected"},
		{desc: "a route's WafPolicy Prevention runs even with the site Off",
			top: `"Waf": {"Mode": "Off"}`, route: `"WafPolicy": {"Mode": "Prevention"}`, path: sqli, wantStatus: 403, wantAction: "blocked"},
		{desc: "a rule excluded everywhere no longer counts",
			top:  `"Waf": {"Mode": "Prevention", "Exclusions": [{"RuleIds": ["942000-942999", "920350"]}]}`,
			path: sqli, wantStatus: 200, wantBackend: true},
		{desc: "a rule excluded on the route no longer counts there",
			top:  `"Waf": {"Mode": "Prevention", "Exclusions": [{"RuleIds": ["942000-942999"], "Routes": ["r"]}]}`,
			path: sqli, wantStatus: 200, wantBackend: true},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			w := newWafHarness(t, tc.top, tc.route, nil)
			resp, body := do(t, "GET", w.front.URL+tc.path, "", "")
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.wantStatus, body)
			}
			if got := w.be.hitCount() > 0; got != tc.wantBackend {
				t.Fatalf("backend reached %v, want %v", got, tc.wantBackend)
			}
			lines := w.auditLines(t)
			if tc.wantAction == "" {
				for _, l := range lines {
					if l["action"] != "allowed" {
						t.Fatalf("unexpected audit line %v", l)
					}
				}
				return
			}
			if len(lines) != 1 {
				t.Fatalf("audit lines %v, want one", lines)
			}
			l := lines[0]
			trace := resp.Header.Get("X-Tether-Trace-Id")
			if l["action"] != tc.wantAction || l["trace_id"] != trace || l["route"] != "r" ||
				!hasRule(l, 942100) || !hasRule(l, 949110) || l["anomaly_score"].(float64) < 5 {
				t.Fatalf("audit line %v (trace %s)", l, trace)
			}
			if tc.wantStatus == 403 {
				if !strings.Contains(body, trace) || len(trace) != 32 {
					t.Fatalf("403 body %q does not name the transaction id %q", body, trace)
				}
				// The transaction id is random hex, and may hold "942" itself.
				if rest := strings.ReplaceAll(body, trace, ""); strings.Contains(rest, "942") || strings.Contains(strings.ToLower(rest), "sql") {
					t.Fatalf("403 body %q leaks rule text", body)
				}
			}
		})
	}
}

func TestWafRequestBody(t *testing.T) {
	attack := "q=" + url.QueryEscape("1' OR '1'='1' UNION SELECT password FROM users--")
	clean := "name=" + strings.Repeat("a", 900)
	cases := []struct {
		desc       string
		waf        string
		body       string
		wantStatus int
		// wantBody: the backend got the client's body byte for byte.
		wantBody bool
	}{
		{desc: "an attack in a form body is blocked", waf: `"Mode": "Prevention"`, body: attack, wantStatus: 403},
		{desc: "a clean body is forwarded intact after inspection", waf: `"Mode": "Prevention"`, body: clean, wantStatus: 200, wantBody: true},
		{desc: "Reject: a body over MaxRequestBodySize is 413 in Prevention",
			waf: `"Mode": "Prevention", "MaxRequestBodySize": 512`, body: clean, wantStatus: 413},
		{desc: "Reject: a body over MaxRequestBodySize is forwarded in Detection",
			waf: `"Mode": "Detection", "MaxRequestBodySize": 512`, body: clean, wantStatus: 200, wantBody: true},
		{desc: "ProcessPartial: the rest streams past the limit uninspected",
			waf:  `"Mode": "Prevention", "MaxRequestBodySize": 512, "RequestBodyLimitAction": "ProcessPartial"`,
			body: clean + "&" + attack, wantStatus: 200, wantBody: true},
		{desc: "ProcessPartial: an attack within the limit is still blocked",
			waf:  `"Mode": "Prevention", "MaxRequestBodySize": 512, "RequestBodyLimitAction": "ProcessPartial"`,
			body: attack + "&" + clean, wantStatus: 403},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			var mu sync.Mutex
			var got []byte
			w := newWafHarness(t, `"Waf": {`+tc.waf+`}`, "", func(rw http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				got = b
				mu.Unlock()
			})
			resp, body := do(t, "POST", w.front.URL+"/form", "application/x-www-form-urlencoded", tc.body)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.wantStatus, body)
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.wantBody && string(got) != tc.body {
				t.Fatalf("backend got %d bytes, want the %d sent", len(got), len(tc.body))
			}
			if !tc.wantBody && w.be.hitCount() != 0 {
				t.Fatal("blocked request reached the backend")
			}
		})
	}
}

func TestWafResponseInspectionOnlyWhenAsked(t *testing.T) {
	leak := func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(rw, "<html>Warning: mysql_fetch_array() expects parameter 1 to be resource, boolean given in /var/www/x.php on line 3</html>")
	}
	cases := []struct {
		desc       string
		waf        string
		wantStatus int
	}{
		{desc: "responses stream untouched by default", waf: `"Mode": "Prevention"`, wantStatus: 200},
		{desc: "InspectResponses blocks a leaking response in Prevention", waf: `"Mode": "Prevention", "InspectResponses": true`, wantStatus: 403},
		{desc: "InspectResponses only logs in Detection", waf: `"Mode": "Detection", "InspectResponses": true`, wantStatus: 200},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			w := newWafHarness(t, `"Waf": {`+tc.waf+`}`, "", leak)
			resp, body := do(t, "GET", w.front.URL+"/page", "", "")
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			if tc.wantStatus == 403 && strings.Contains(body, "mysql") {
				t.Fatalf("blocked response leaked the backend's body: %q", body)
			}
			if tc.wantStatus == 200 && !strings.Contains(body, "mysql_fetch_array") {
				t.Fatalf("response body changed: %q", body)
			}
		})
	}
}

func TestWafMetrics(t *testing.T) {
	w := newWafHarness(t, `"Waf": {"Mode": "Prevention"}`, "", nil)
	do(t, "GET", w.front.URL+sqli, "", "")
	do(t, "GET", w.front.URL+"/clean", "", "")
	reg := w.reg
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			v := m.GetCounter().GetValue()
			switch {
			case mf.GetName() == "tether_waf_requests_total" && labels["route"] == "r" && labels["action"] == "blocked" && v == 1:
				found["blocked"] = true
			case mf.GetName() == "tether_waf_requests_total" && labels["route"] == "r" && labels["action"] == "allowed" && v == 1:
				found["allowed"] = true
			case mf.GetName() == "tether_waf_rule_matches_total" && labels["rule_id"] == "942100" && v == 1:
				found["rule"] = true
			}
		}
	}
	if len(found) != 3 {
		t.Fatalf("metrics found %v, want blocked, allowed and rule 942100", found)
	}
}

func TestWafRuleFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "local.conf")
	os.WriteFile(good, []byte("# local rules\nSecRule ARGS:probe \"@streq tether\" \"id:10001,phase:1,deny,status:403,log,msg:'probe'\"\n"), 0o600)
	bad := filepath.Join(dir, "bad.conf")
	os.WriteFile(bad, []byte("# ok\nSecRule ARGS \"@rx a\" \"id:10002,phase:1,pass,nolog\"\n\nSecRule ARGS \"@rx (\" \\\n  \"id:10003,phase:1,deny\"\n"), 0o600)

	t.Run("a bad rule is a config error with file and line", func(t *testing.T) {
		js := simpleConfig(map[string]string{"d1": "http://127.0.0.1:1"}, "", "", `"Waf": {"Mode": "Detection", "Rules": [`+jsonString(good)+`, `+jsonString(bad)+`]}`)
		_, _, err := config.Parse([]byte(js), "json")
		var errs config.Errors
		errors.As(err, &errs)
		if len(errs) != 1 || errs[0].Path != "Waf.Rules[1]" || !strings.Contains(errs[0].Message, "bad.conf:4:") {
			t.Fatalf("errors %v, want Waf.Rules[1] naming bad.conf:4", errs)
		}
	})
	t.Run("extra rules run after the CRS, and a reload swaps them without dropping requests", func(t *testing.T) {
		w := newWafHarness(t, `"Waf": {"Mode": "Prevention", "Rules": [`+jsonString(good)+`]}`, "", nil)
		if resp, _ := do(t, "GET", w.front.URL+"/?probe=tether", "", ""); resp.StatusCode != 403 {
			t.Fatalf("local rule: status %d, want 403", resp.StatusCode)
		}
		// Reload to a rule set without the local rule while requests run.
		var wg sync.WaitGroup
		stop := make(chan struct{})
		fails := make(chan int, 1000)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Get(w.front.URL + "/clean")
				if err != nil {
					fails <- -1
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					fails <- resp.StatusCode
				}
			}
		}()
		cfg := mustParse(t, simpleConfig(map[string]string{"d1": w.be.URL}, "", "", `"Waf": {"Mode": "Prevention"}`))
		if err := w.p.Update(cfg); err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
		close(fails)
		for f := range fails {
			t.Fatalf("request during reload failed: %d", f)
		}
		if resp, _ := do(t, "GET", w.front.URL+"/?probe=tether", "", ""); resp.StatusCode != 200 {
			t.Fatalf("after reload: status %d, want 200", resp.StatusCode)
		}
	})
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestWafOffBuildsNoFirewallAndNoTransaction(t *testing.T) {
	for _, top := range []string{``, `"Waf": {"Mode": "Off"}`, `"Waf": {"Mode": "Off", "ParanoiaLevel": 4}`} {
		cfg := mustParse(t, simpleConfig(map[string]string{"d1": "http://127.0.0.1:1"}, "", "", top))
		h := newHarness(t, cfg, nil)
		rt := h.p.rt.Load()
		if rt.waf != nil || rt.routesByID["r"].waf != nil {
			t.Fatalf("%s: a rule set or policy was built with the WAF off", top)
		}
	}
}

func TestWafResponseInspectionLeavesUpgradesAlone(t *testing.T) {
	w := newWafHarness(t, `"Waf": {"Mode": "Prevention", "InspectResponses": true}`, "", func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/plain")
		rw.Header().Set("Connection", "Upgrade")
		rw.Header().Set("Upgrade", "echo")
		rw.WriteHeader(http.StatusSwitchingProtocols)
		conn, brw, err := http.NewResponseController(rw).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		line, _ := brw.ReadString('\n')
		brw.WriteString("echo:" + line)
		brw.Flush()
	})
	req, _ := http.NewRequest("GET", w.front.URL+"/ws", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	req.Header.Set("User-Agent", "tether-test")
	req.Header.Set("Accept", "*/*")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		t.Fatal("upgraded body is not writable")
	}
	if cd, ok := rwc.(interface{ SetDeadline(time.Time) error }); ok {
		_ = cd.SetDeadline(time.Now().Add(10 * time.Second))
	}
	io.WriteString(rwc, "hello\n")
	got := make([]byte, len("echo:hello\n"))
	if _, err := io.ReadFull(rwc, got); err != nil || string(got) != "echo:hello\n" {
		t.Fatalf("echo %q, %v", got, err)
	}
}
