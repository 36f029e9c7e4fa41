package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tether-proxy/tether/store"
)

// fakeConfig checks a pushed file as the node does in outline: a
// ReverseProxy section, with no route named "bad"; other sections are
// left out with a warning.
type fakeConfig struct{ applied uint64 }

func (f *fakeConfig) Check(body []byte) ([]byte, []string, []FieldError) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, nil, []FieldError{{Error: err.Error()}}
	}
	var errs []FieldError
	var warnings []string
	for k := range top {
		if k != "ReverseProxy" {
			warnings = append(warnings, k+": a node's own setting, not pushed; each node keeps its file's")
		}
	}
	if top["ReverseProxy"] == nil {
		errs = append(errs, FieldError{Path: "ReverseProxy", Error: "missing"})
	}
	if strings.Contains(string(top["ReverseProxy"]), `"bad"`) {
		errs = append(errs, FieldError{Path: "ReverseProxy.Routes.bad.Match", Error: "missing"})
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	if strings.Contains(string(top["ReverseProxy"]), `"Unknown"`) {
		warnings = append(warnings, "ReverseProxy.Unknown: an unknown key, ignored")
	}
	return top["ReverseProxy"], warnings, nil
}

func (f *fakeConfig) Applied() (uint64, string) { return f.applied, "" }

func TestConfigEndpoints(t *testing.T) {
	a, st, n, _ := newTestAPI(t)
	a.Config = &fakeConfig{applied: 0}
	h := a.Handler()

	resp, body := answer(t, h, "GET", "/v1/config", nil, "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") != `"0"` || body["version"] != 0.0 || body["config"] != nil {
		t.Fatalf("before any push: %d %v %v", resp.StatusCode, resp.Header, body)
	}
	// Invalid: every error with its path, nothing committed.
	resp, body = answer(t, h, "PUT", "/v1/config", nil, `{"Kestrel":{},"ReverseProxy":{"Routes":{"bad":{}}}}`)
	if resp.StatusCode != http.StatusBadRequest || body["error"] != "config invalid: 1 errors" || len(st.committed) != 0 ||
		!strings.Contains(fmt.Sprint(body["errors"]), "ReverseProxy.Routes.bad.Match") {
		t.Fatalf("invalid push: %d %v, committed %v", resp.StatusCode, body, st.committed)
	}
	resp, body = answer(t, h, "PUT", "/v1/config", map[string]string{HeaderRequestID: "P1"}, `{"ReverseProxy":{"Routes":{"r1":{}},"Clusters":{"c1":{}}}}`)
	if resp.StatusCode != http.StatusOK || body["version"] != 1.0 || body["summary"] != "1 routes, 1 clusters" || resp.Header.Get(HeaderIndex) != "6" || resp.Header.Get("ETag") != `"1"` {
		t.Fatalf("push: %d %v %v", resp.StatusCode, resp.Header, body)
	}
	if c, ok := st.committed[0].(store.SetConfig); !ok || c.ReqID != "P1" || c.IfVersion != 0 || !c.At.Equal(n.now) || string(c.Content) != `{"Routes":{"r1":{}},"Clusters":{"c1":{}}}` {
		t.Fatalf("committed %#v", st.committed)
	}
	// If-Match, quoted or bare: the current version passes, a stale one is 412.
	resp, body = answer(t, h, "PUT", "/v1/config", map[string]string{"If-Match": `"1"`}, `{"ReverseProxy":{"Routes":{"r1":{},"r2":{}},"Clusters":{"c1":{"x":1}}}}`)
	if resp.StatusCode != http.StatusOK || body["version"] != 2.0 || body["summary"] != "2 routes, 1 clusters; routes added: r2; clusters changed: c1" {
		t.Fatalf("push If-Match 1: %d %v", resp.StatusCode, body)
	}
	resp, body = answer(t, h, "PUT", "/v1/config", map[string]string{"If-Match": "1"}, `{"ReverseProxy":{}}`)
	if resp.StatusCode != http.StatusPreconditionFailed || body["error"] != "config version is 2, not 1" || body["version"] != 2.0 {
		t.Fatalf("stale If-Match: %d %v", resp.StatusCode, body)
	}
	if resp, _ := answer(t, h, "PUT", "/v1/config", map[string]string{"If-Match": "*"}, `{"ReverseProxy":{}}`); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("If-Match *: %d", resp.StatusCode)
	}

	resp, body = answer(t, h, "GET", "/v1/config", nil, "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") != `"2"` || body["version"] != 2.0 ||
		fmt.Sprint(body["config"]) != "map[ReverseProxy:map[Clusters:map[c1:map[x:1]] Routes:map[r1:map[] r2:map[]]]]" {
		t.Fatalf("current: %d %v %v", resp.StatusCode, resp.Header, body)
	}
	_, body = answer(t, h, "GET", "/v1/config/history", nil, "")
	if vs, _ := body["versions"].([]any); len(vs) != 2 || vs[0].(map[string]any)["version"] != 2.0 || vs[1].(map[string]any)["summary"] != "1 routes, 1 clusters" {
		t.Fatalf("history: %v", body)
	}
	resp, body = answer(t, h, "GET", "/v1/config/versions/1", nil, "")
	if resp.StatusCode != http.StatusOK || body["version"] != 1.0 || resp.Header.Get("ETag") != `"1"` {
		t.Fatalf("version 1: %d %v", resp.StatusCode, body)
	}
	if resp, body := answer(t, h, "GET", "/v1/config/versions/9", nil, ""); resp.StatusCode != http.StatusNotFound || !strings.Contains(fmt.Sprint(body["error"]), "config version 9 is not kept") {
		t.Fatalf("version 9: %d %v", resp.StatusCode, body)
	}

	// Rollback commits the old content as a new version.
	resp, body = answer(t, h, "POST", "/v1/config/rollback", nil, `{"version":1}`)
	if resp.StatusCode != http.StatusOK || body["version"] != 3.0 || body["summary"] != "rollback to version 1" || string(st.ConfigCurrent().Content) != `{"Routes":{"r1":{}},"Clusters":{"c1":{}}}` {
		t.Fatalf("rollback: %d %v", resp.StatusCode, body)
	}
	if resp, _ := answer(t, h, "POST", "/v1/config/rollback", nil, `{"version":7}`); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("rollback to a version not kept: %d", resp.StatusCode)
	}
	if resp, body := answer(t, h, "POST", "/v1/config/rollback", map[string]string{"If-Match": `"2"`}, `{"version":1}`); resp.StatusCode != http.StatusPreconditionFailed || body["version"] != 3.0 {
		t.Fatalf("rollback with a stale If-Match: %d %v", resp.StatusCode, body)
	}
	a.Config.(*fakeConfig).applied = 3
	if v := a.configStatus(); v != 3 {
		t.Fatalf("status config_version %d", v)
	}
}

func TestSummarize(t *testing.T) {
	for _, c := range []struct{ prev, cur, want string }{
		{"", `{"Routes":{"a":{}}}`, "1 routes, 0 clusters"},
		{`{"Routes":{"a":{},"b":{}}}`, `{"Routes":{"a":{ }}}`, "1 routes, 0 clusters; routes removed: b"},
		{`{"Routes":{"a":{}}}`, `{"Routes":{"a":{}}}`, "1 routes, 0 clusters; no route or cluster changed"},
	} {
		var prev []byte
		if c.prev != "" {
			prev = []byte(c.prev)
		}
		if got := Summarize(prev, []byte(c.cur)); got != c.want {
			t.Errorf("Summarize(%s, %s) = %q, want %q", c.prev, c.cur, got, c.want)
		}
	}
}

// TestConfigPushAnswersWithItsWarnings: a section left out and a key the
// node accepts without implementing it are named in the push's answer,
// never passed over.
func TestConfigPushAnswersWithItsWarnings(t *testing.T) {
	a, _, _, _ := newTestAPI(t)
	a.Config = &fakeConfig{}
	h := a.Handler()
	resp, body := answer(t, h, "PUT", "/v1/config", nil, `{"Kestrel":{},"ReverseProxy":{"Unknown":1}}`)
	if resp.StatusCode != http.StatusOK || fmt.Sprint(body["warnings"]) != "[Kestrel: a node's own setting, not pushed; each node keeps its file's ReverseProxy.Unknown: an unknown key, ignored]" {
		t.Fatalf("push with an unknown key: %d %v", resp.StatusCode, body)
	}
	resp, body = answer(t, h, "PUT", "/v1/config", nil, `{"ReverseProxy":{}}`)
	if resp.StatusCode != http.StatusOK || body["warnings"] != nil {
		t.Fatalf("push without warnings: %d %v", resp.StatusCode, body)
	}
}
