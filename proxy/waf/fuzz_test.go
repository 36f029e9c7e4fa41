package waf

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/tether-proxy/tether/proxy/config"
)

var (
	fuzzOnce   sync.Once
	fuzzPolicy *Policy
	fuzzErr    error
)

// prevention builds a Prevention policy with a small body limit, once.
func prevention(t testing.TB) *Policy {
	t.Helper()
	fuzzOnce.Do(func() {
		cfg, _, err := config.Parse([]byte(`{"Waf":{"Mode":"Prevention","MaxRequestBodySize":2048,"InspectResponses":true},
		  "ReverseProxy":{"Routes":{"r":{"ClusterId":"c","Match":{"Path":"{**all}"}}},
		  "Clusters":{"c":{"Destinations":{"d":{"Address":"http://127.0.0.1:1"}}}}}}`), "json")
		if err != nil {
			fuzzErr = err
			return
		}
		fw, errs := New(cfg, nil, Options{})
		if errs != nil {
			fuzzErr = errs
			return
		}
		fuzzPolicy = fw.Policy(cfg, cfg.ReverseProxy.Routes["r"])
	})
	if fuzzErr != nil {
		t.Fatal(fuzzErr)
	}
	return fuzzPolicy
}

// FuzzCheck feeds arbitrary request targets, header values, bodies and
// backend responses through a transaction: never a panic, a blocked
// request is always answered, and a forwarded body is the client's body.
func FuzzCheck(f *testing.F) {
	f.Add("/?id=1' OR '1'='1", "application/x-www-form-urlencoded", "a=1&b=<script>alert(1)</script>", "text/html", "ok")
	f.Add("/upload", "multipart/form-data; boundary=x", "--x\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nv\r\n--x--\r\n", "text/plain", "")
	f.Add("/api", "application/json", `{"a":[1,{"b":"../../etc/passwd"}]}`, "application/json", `{"e":"mysql_fetch_array()"}`)
	f.Add("/x", "text/xml", "<a><b>&x;</b></a>", "text/plain", strings.Repeat("y", 3000))
	f.Fuzz(func(t *testing.T, target, ctype, body, rtype, rbody string) {
		p := prevention(t)
		if !strings.HasPrefix(target, "/") {
			target = "/" + target
		}
		r := httptest.NewRequest("POST", "http://example.test/", strings.NewReader(body))
		r.RequestURI = target // as received: Coraza parses it itself
		r.Header.Set("Content-Type", ctype)
		w := httptest.NewRecorder()
		tx, fwd, blocked := p.Check(w, r, r.Body, "0123456789abcdef0123456789abcdef")
		defer tx.Done()
		if blocked {
			if w.Code < 300 || !strings.Contains(w.Body.String(), "0123456789abcdef0123456789abcdef") {
				t.Fatalf("blocked with %d %q", w.Code, w.Body.String())
			}
			return
		}
		got, err := io.ReadAll(fwd)
		_ = fwd.Close()
		if err == nil && string(got) != body {
			t.Fatalf("forwarded body differs: %d bytes, sent %d", len(got), len(body))
		}
		resp := &http.Response{StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {rtype}}, Body: io.NopCloser(strings.NewReader(rbody)), Request: r}
		tx.InspectResponse(resp)
		out, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == 200 && string(out) != rbody {
			t.Fatalf("response body changed: %d bytes, backend sent %d", len(out), len(rbody))
		}
	})
}

func TestRuleErrorNamesFileAndLine(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/local.conf"
	rules := "# comment\nSecRule ARGS \"@rx ok\" \"id:1,phase:1,pass,nolog\"\n\nSecRule ARGS \\\n  \"@rx (\" \\\n  \"id:2,phase:1,deny\"\n"
	if err := writeFile(path, rules); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.Parse([]byte(`{"Waf":{"Mode":"Detection"},"ReverseProxy":{"Routes":{"r":{"ClusterId":"c","Match":{"Path":"{**all}"}}},"Clusters":{"c":{"Destinations":{"d":{"Address":"http://127.0.0.1:1"}}}}}}`), "json")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Waf.SetupRules = []string{path}
	_, errs := New(cfg, nil, Options{})
	if len(errs) != 1 || errs[0].Path != "Waf.SetupRules[0]" || !strings.Contains(errs[0].Message, "local.conf:4: ") {
		t.Fatalf("errors %v, want Waf.SetupRules[0] naming local.conf:4 (where the directive starts)", errs)
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }
