package h2server

import (
	"net/http"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/internal/httpdate"
)

// A response without a Date field gets the shared once-a-second value
// (proxy/internal/httpdate); one with its own keeps it.
func TestResponseDateIsTheSharedValue(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	t.Cleanup(httpdate.SetClock(func() int64 { return 1 << 62 }, func() time.Time { return at }))
	addr := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/own" {
			w.Header().Set("Date", "Tue, 01 Dec 2026 12:00:00 GMT")
		}
		w.WriteHeader(204)
	}), nil)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for path, want := range map[string]string{"/": "Sun, 06 Dec 2026 10:00:00 GMT", "/own": "Tue, 01 Dec 2026 12:00:00 GMT"} {
		resp, err := c.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Date"); resp.ProtoMajor != 2 || got != want {
			t.Fatalf("%s: HTTP/%d Date %q, want HTTP/2 and %q", path, resp.ProtoMajor, got, want)
		}
	}
}
