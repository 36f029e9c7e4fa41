package apiclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestConfigCallsSendAndReadTheContract: each config method's request
// (method, path, If-Match, body) and the answers it decodes, refusals
// included.
func TestConfigCallsSendAndReadTheContract(t *testing.T) {
	var got []string // "METHOD PATH [If-Match] body" of each request
	answer := map[string]struct {
		status int
		body   string
	}{
		"PUT /v1/config":               {200, `{"version": 4, "index": 17, "summary": "1 route, 1 cluster"}`},
		"POST /v1/config/rollback":     {200, `{"version": 5, "index": 19, "summary": "rollback to version 2", "warnings": ["w1"]}`},
		"GET /v1/config":               {200, `{"version": 4, "time": "2026-12-06T11:00:00.5Z", "summary": "s", "config": {"ReverseProxy": {"Routes": {}}}}`},
		"GET /v1/config/versions/2":    {200, `{"version": 2, "time": "2026-12-06T10:00:00Z", "summary": "s2", "config": {"ReverseProxy": {}}}`},
		"GET /v1/config/versions/9":    {404, `{"error": "version 9 is not kept: the history holds 1 to 4"}`},
		"GET /v1/config/history":       {200, `{"versions": [{"version": 4, "time": "2026-12-06T11:00:00Z", "summary": "s"}, {"version": 3, "time": "2026-12-06T10:30:00Z", "summary": "t"}]}`},
		"PUT /v1/config?invalid":       {400, `{"error": "config invalid: 2 errors", "errors": [{"path": "ReverseProxy.Routes.r1.Match", "error": "missing"}, {"path": "ReverseProxy.Routes.r1.ClusterId", "error": "no cluster named \"c9\""}]}`},
		"PUT /v1/config?stale":         {412, `{"error": "config version is 7, not 4", "version": 7}`},
		"PUT /v1/config?noleader":      {503, `{"error": "no leader"}`},
		"PUT /v1/config?html":          {200, `<html>`},
		"PUT /v1/config?empty":         {502, ``},
		"POST /v1/config/rollback?412": {412, `{"error": "config version is 6, not 5", "version": 6}`},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		key := r.Method + " " + r.URL.Path
		if r.URL.RawQuery != "" {
			key += "?" + r.URL.RawQuery
		}
		got = append(got, key+" ["+r.Header.Get("If-Match")+"] "+string(b))
		if len(b) > 0 && r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: Content-Type %q", key, r.Header.Get("Content-Type"))
		}
		a, ok := answer[key]
		if !ok {
			a.status, a.body = 404, `{"error": "no such path"}`
		}
		w.WriteHeader(a.status)
		w.Write([]byte(a.body))
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := Client{Base: srv.URL}

	pushed, err := c.PushConfig(ctx, []byte(`{"ReverseProxy": {}}`), 3)
	if err != nil || pushed.Version != 4 || pushed.Index != 17 || pushed.Summary != "1 route, 1 cluster" {
		t.Fatalf("push: %+v %v", pushed, err)
	}
	if want := `PUT /v1/config ["3"] {"ReverseProxy": {}}`; got[0] != want {
		t.Fatalf("push sent %q, want %q", got[0], want)
	}
	if _, err := c.PushConfig(ctx, []byte(`{}`), 0); err != nil || got[1] != "PUT /v1/config [] {}" {
		t.Fatalf("push without a precondition sent %q (%v): want no If-Match", got[1], err)
	}

	rb, err := c.RollbackConfig(ctx, 2, 0)
	if err != nil || rb.Version != 5 || len(rb.Warnings) != 1 || got[2] != `POST /v1/config/rollback [] {"version":2}` {
		t.Fatalf("rollback: %+v %v, sent %q", rb, err, got[2])
	}

	cur, err := c.Config(ctx)
	if err != nil || cur.Version != 4 || !cur.Time.Equal(time.Date(2026, 12, 6, 11, 0, 0, 5e8, time.UTC)) || !strings.Contains(string(cur.Config), `"Routes"`) {
		t.Fatalf("current: %+v %v", cur, err)
	}
	v2, err := c.ConfigAt(ctx, 2)
	if err != nil || v2.Version != 2 || v2.Summary != "s2" {
		t.Fatalf("version 2: %+v %v", v2, err)
	}
	if _, err := c.ConfigAt(ctx, 9); err == nil || err.Error() != "version 9 is not kept: the history holds 1 to 4 (HTTP 404)" {
		t.Fatalf("version 9: %v", err)
	}
	hist, err := c.ConfigHistory(ctx)
	if err != nil || len(hist) != 2 || hist[0].Version != 4 || hist[1].Summary != "t" {
		t.Fatalf("history: %+v %v", hist, err)
	}

	// Refusals: each path of the query string picks one.
	for _, tc := range []struct {
		path  string
		check func(error) bool
		want  string
	}{
		{"?invalid", func(err error) bool {
			var e *ConfigInvalidError
			return errors.As(err, &e) && len(e.Errors) == 2 && e.Errors[0].String() == "ReverseProxy.Routes.r1.Match: missing" && e.Errors[1].Path == "ReverseProxy.Routes.r1.ClusterId"
		}, "config invalid: 2 errors (HTTP 400)"},
		{"?stale", func(err error) bool {
			var e *ConfigStaleError
			return errors.As(err, &e) && e.Current == 7
		}, "config version is 7, not 4 (HTTP 412)"},
		{"?noleader", func(err error) bool { return true }, "no leader (HTTP 503)"},
		{"?html", func(err error) bool { return true }, "with a body that is not JSON: is it a proxy port?"},
		{"?empty", func(err error) bool { return true }, "admin API answered 502 Bad Gateway"},
	} {
		var err error
		_, err = (&Client{Base: srv.URL}).pushTo(ctx, "/v1/config"+tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !tc.check(err) {
			t.Errorf("%s: got %v (%T), want %q", tc.path, err, err, tc.want)
		}
	}
	var stale *ConfigStaleError
	if _, err := (&Client{Base: srv.URL}).rollbackTo(ctx, "/v1/config/rollback?412"); !errors.As(err, &stale) || stale.Current != 6 {
		t.Errorf("a stale rollback: %v", err)
	}
}

// pushTo is PushConfig to another path (the fake server picks its
// answer by the query string).
func (c *Client) pushTo(ctx context.Context, path string) (ConfigPushed, error) {
	var out ConfigPushed
	return out, c.configCall(ctx, http.MethodPut, path, []byte(`{}`), 4, &out)
}

func (c *Client) rollbackTo(ctx context.Context, path string) (ConfigPushed, error) {
	var out ConfigPushed
	return out, c.configCall(ctx, http.MethodPost, path, []byte(`{"version":1}`), 5, &out)
}

// TestConfigBeforeAnyPush: version 0 has no time and a null config.
func TestConfigBeforeAnyPush(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"0"`)
		w.Write([]byte(`{"version": 0, "config": null}`))
	}))
	defer srv.Close()
	v, err := (&Client{Base: srv.URL}).Config(context.Background())
	if err != nil || v.Version != 0 || !v.Time.IsZero() || string(v.Config) != "null" {
		t.Fatalf("got %+v %v", v, err)
	}
}
