package demo

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
)

// quietLogger writes to stderr with TETHER_TEST_LOG set, else nowhere.
func quietLogger() *slog.Logger {
	var w io.Writer = io.Discard
	if os.Getenv("TETHER_TEST_LOG") != "" {
		w = os.Stderr
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

func TestDemoStartsNodesThatStickSessionsAcrossNodes(t *testing.T) {
	d, err := Start(Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop(context.Background())
	lines := d.Lines()
	if len(lines) != 7 || !strings.HasPrefix(lines[6], "leader=n") || !strings.HasPrefix(lines[0], "n1 proxy=http://127.0.0.1:") || !strings.Contains(lines[0], " admin=http://127.0.0.1:") {
		t.Fatalf("demo lines: %q", lines)
	}
	resp, err := http.Get("http://" + d.Nodes[0].ProxyAddrs()[0].String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	backend := resp.Header.Get("X-Demo-Backend")
	cookie := strings.Split(resp.Header.Get("Set-Cookie"), ";")[0]
	if backend == "" || cookie == "" {
		t.Fatalf("first demo response: backend %q cookie %q", backend, cookie)
	}
	for _, n := range d.Nodes {
		req, _ := http.NewRequest("GET", "http://"+n.ProxyAddrs()[0].String()+"/", nil)
		req.Header.Set("Cookie", cookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Demo-Backend"); got != backend {
			t.Fatalf("node %s sent the session to %s, want %s", n.ID(), got, backend)
		}
	}
}
