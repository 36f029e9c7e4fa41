package h2server

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestH2Spec runs h2spec (github.com/summerwind/h2spec, the HTTP/2
// conformance suite) against the own server over h2c, when the h2spec
// binary is on PATH or named by $H2SPEC; skipped otherwise.
func TestH2Spec(t *testing.T) {
	bin := os.Getenv("H2SPEC")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("h2spec"); err != nil {
			t.Skip("h2spec not installed (go install github.com/summerwind/h2spec/cmd/h2spec@latest)")
		}
	}
	if testing.Short() {
		t.Skip("slow")
	}
	addr := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}), nil)
	_, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-h", "127.0.0.1", "-p", port, "-o", "3")
	out, _ := cmd.CombinedOutput() // exit status 1 with any failure
	failed := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, "× "); i >= 0 {
			failed[strings.TrimSpace(line[i+len("× "):])] = true
		}
	}
	if !strings.Contains(string(out), " tests, ") {
		t.Fatalf("h2spec did not finish:\n%s", out)
	}
	for name := range failed {
		if h2specDiffers[name] == "" {
			t.Errorf("h2spec: %s", name)
		}
	}
	if t.Failed() {
		t.Logf("%s", out)
	}
	t.Logf("%s", lastLines(out, 1))
}

// h2specDiffers are the h2spec cases the server fails on purpose, each
// as net/http's HTTP/2 server does, with the reason.
var h2specDiffers = map[string]string{
	"2: Sends invalid connection preface": "an h2c preface is read by net/http, which resets a connection " +
		"whose first bytes are not HTTP/2's (h2spec wants a plain close)",
	"1: Sends a HEADERS frame that contains the connection-specific header field": "answered 400, " +
		"as net/http's HTTP/2 server answers it (the proxy's parity suite holds every HTTP/2 mode to that)",
	"2: Sends a HEADERS frame that contains the TE header field with any value other than \"trailers\"": "answered 400, as above",
}

func lastLines(b []byte, n int) []byte {
	for i := len(b) - 2; i >= 0; i-- {
		if b[i] == '\n' {
			if n--; n == 0 {
				return b[i+1:]
			}
		}
	}
	return b
}

// startH2C serves h over h2c with prior knowledge through an http.Server
// whose HTTP/2 is the own server; mod adjusts the http.Server first.
func startH2C(t *testing.T, h http.Handler, mod func(*http.Server)) string {
	t.Helper()
	srv := &http.Server{Handler: h, Protocols: new(http.Protocols), ReadHeaderTimeout: 10 * time.Second}
	srv.Protocols.SetUnencryptedHTTP2(true)
	if mod != nil {
		mod(srv)
	}
	New(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
	})
	return ln.Addr().String()
}

var _ = strconv.Itoa
