package admin

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"testing"
)

// answering is a Handlers whose every endpoint answers 200 with its name:
// the routes and guards are under test, not the node's endpoints.
func answering() Handlers {
	h := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			WriteJSON(w, http.StatusOK, map[string]string{"endpoint": name})
		}
	}
	return Handlers{
		Ready: h("ready"), Metrics: h("metrics"), Status: h("status"), Members: h("members"), Events: h("events"),
		Join: h("join"), Leave: h("leave"), Remove: h("remove"),
		KeyringList: h("keyring"), KeyringRotate: h("rotate"), KeyringRevoke: h("revoke"),
		SecretsList: h("secrets"), SecretInstall: h("install"), SecretUse: h("use"), SecretRemove: h("secret-remove"),
		SnapshotSave: h("snapshot"), SnapshotRestore: h("restore"),
		Clusters: h("clusters"), Destinations: h("destinations"), Drain: h("drain"), Undrain: h("undrain"),
		ConfigGet: h("config"), ConfigPush: h("config-push"), ConfigHistory: h("config-history"), ConfigVersion: h("config-version"),
		ConfigRollback: h("config-rollback"),
	}
}

func same(h http.HandlerFunc) http.HandlerFunc { return h }

func TestUIServedFromEmbeddedAssetsWithoutToken(t *testing.T) {
	srv := httptest.NewServer(Handler(Config{Token: []byte("tok"), AtIndex: same, OnLeader: same}, answering()))
	defer srv.Close()
	base := srv.URL
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	root, err := fs.Sub(uiAssets, "ui")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{ // every embedded file, with its content type
		"/ui/":           "text/html; charset=utf-8",
		"/ui/index.html": "text/html; charset=utf-8",
	}
	err = fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			ct, ok := uiTypes[path.Ext(p)]
			if !ok {
				t.Errorf("embedded %s has no content type in uiTypes", p)
			}
			want["/ui/"+p] = ct
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"/ui/app.js", "/ui/sse.js", "/ui/style.css", "/ui/index.html"} {
		if want[f] == "" {
			t.Fatalf("%s is not embedded", f)
		}
	}
	for p, ct := range want {
		resp, err := noRedirect.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s without a token = %d, want 200", p, resp.StatusCode)
			continue
		}
		if got := resp.Header.Get("Content-Type"); got != ct {
			t.Errorf("%s Content-Type %q, want %q", p, got, ct)
		}
		name := strings.TrimPrefix(p, "/ui/")
		if name == "" {
			name = "index.html"
		}
		if embedded, _ := fs.ReadFile(root, name); string(embedded) != string(body) {
			t.Errorf("%s is not the embedded file", p)
		}
		if c := resp.Header.Values("Set-Cookie"); len(c) > 0 {
			t.Errorf("%s sets cookies: %v", p, c)
		}
		h := resp.Header
		if !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") || h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s lacks the framing and sniffing defences: %v", p, h)
		}
		// Revalidation: the same ETag answers 304.
		req, _ := http.NewRequest("GET", base+p, nil)
		req.Header.Set("If-None-Match", h.Get("ETag"))
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNotModified {
			t.Errorf("%s with its ETag: %v %v, want 304", p, resp.StatusCode, err)
		} else {
			resp.Body.Close()
		}
	}

	for _, c := range []struct{ path, location string }{{"/ui", "/ui/"}, {"/", "/ui/"}} {
		resp, err := noRedirect.Get(base + c.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 3 || resp.Header.Get("Location") != c.location {
			t.Errorf("GET %s = %d Location %q, want a redirect to %s", c.path, resp.StatusCode, resp.Header.Get("Location"), c.location)
		}
	}
	// The page holds no data; the data still needs the token.
	for p, code := range map[string]int{"/ui/nope.js": 404, "/v1/status": 401, "/v1/events": 401, "/v1/members": 401} {
		resp, err := noRedirect.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("GET %s without a token = %d, want %d", p, resp.StatusCode, code)
		}
	}
}

// TestUIKeepsTheTokenOutOfCookies: the page sends the token as a bearer
// header, keeps it in the tab's sessionStorage, and never writes a cookie
// or puts the token in a URL (the browser test checks the cookie jar too).
func TestUIKeepsTheTokenOutOfCookies(t *testing.T) {
	var js strings.Builder
	for _, f := range []string{"ui/app.js", "ui/sse.js"} {
		b, err := uiAssets.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		js.Write(b)
	}
	src := js.String()
	for _, must := range []string{"Authorization: `Bearer ${state.token}`", "sessionStorage", "credentials: 'omit'"} {
		if !strings.Contains(src, must) {
			t.Errorf("the page's scripts lack %q", must)
		}
	}
	for _, never := range []string{"document.cookie", "cookieStore", "localStorage", "?token", "&token", "new EventSource"} {
		if strings.Contains(src, never) {
			t.Errorf("the page's scripts use %q", never)
		}
	}
}
