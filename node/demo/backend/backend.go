package backend

import (
	"fmt"
	"net/http"
)

// Handler answers every request naming itself in the X-Demo-Backend
// header and in the body; /healthz answers 200.
func Handler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Demo-Backend", name)
		if r.URL.Path == "/healthz" {
			fmt.Fprintln(w, "ok")
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "hello from %s\npath: %s\nx-forwarded-for: %s\ntrace id: %s\n",
			name, r.URL.RequestURI(), r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Tether-Trace-Id"))
	})
}
