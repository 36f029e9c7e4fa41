package admin

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// uiAssets is the cluster page at /ui/: plain HTML, CSS and JavaScript
// modules, embedded so the binary needs nothing beside it (no CDN, no
// build step). The assets hold no data: every figure comes from the admin
// API, with the token when one is configured.
//
//go:embed ui
var uiAssets embed.FS

// uiCSP lets the page load only its own assets and talk only to its own
// node; frame-ancestors 'none' stops another site from framing its
// buttons (clickjacking).
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// uiTypes are the assets' content types, fixed here rather than read from
// the host's mime tables (a module script must be served as JavaScript).
var uiTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

type uiFile struct {
	ctype, etag string
}

// uiHandler serves the embedded page. It needs no token: the page asks
// for it and sends it as a bearer header with every API call.
func uiHandler() http.Handler {
	root, err := fs.Sub(uiAssets, "ui")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	files := map[string]uiFile{}
	_ = fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(root, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		files["/"+p] = uiFile{ctype: uiTypes[path.Ext(p)], etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	files["/"] = files["/index.html"]
	fileServer := http.FileServerFS(root)
	return http.StripPrefix("/ui", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := files[r.URL.Path]
		if !ok || strings.Contains(r.URL.Path, "..") {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", uiCSP)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// Revalidated on every load (ETag): an upgraded node serves its
		// own page at once.
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", f.etag)
		if f.ctype != "" {
			h.Set("Content-Type", f.ctype)
		}
		if r.URL.Path == "/index.html" {
			// FileServer would redirect it to "/": serve it as it is.
			r2 := *r
			u := *r.URL
			u.Path = "/"
			r2.URL = &u
			r = &r2
		}
		fileServer.ServeHTTP(w, r)
	}))
}
