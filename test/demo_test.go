package test

import (
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

var demoLine = regexp.MustCompile(`(?m)^(n[1-3]) proxy=(http://127\.0\.0\.1:\d+) admin=(http://127\.0\.0\.1:\d+)$`)

func TestDemoRunsThreeStickyNodesAndStopsOnInterrupt(t *testing.T) {
	p := start(t, nil, "demo")
	var lines [][]string
	testutil.Eventually(t, 60*time.Second, "three demo node lines", func() bool {
		lines = demoLine.FindAllStringSubmatch(p.Stdout.String(), -1)
		return len(lines) == 3
	})

	// A session started on n1 sticks on every node: HashCookie keys are the
	// same everywhere.
	c := &http.Client{}
	status, hdr, body := testutil.Get(t, c, lines[0][2]+"/", nil)
	if status != 200 {
		t.Fatalf("demo n1: %d %s", status, body)
	}
	backend := hdr.Get("X-Demo-Backend")
	if backend == "" || !strings.Contains(body, backend) {
		t.Fatalf("demo backend does not name itself: header %q body %q", backend, body)
	}
	cookie := strings.Split(hdr.Get("Set-Cookie"), ";")[0]
	if !strings.HasPrefix(cookie, ".Tether.Affinity=") {
		t.Fatalf("no affinity cookie: %q", hdr.Get("Set-Cookie"))
	}
	for _, l := range lines {
		for i := 0; i < 3; i++ {
			_, h, _ := testutil.Get(t, c, l[2]+"/", map[string]string{"Cookie": cookie})
			if got := h.Get("X-Demo-Backend"); got != backend {
				t.Fatalf("%s sent the session to %s, want %s", l[1], got, backend)
			}
		}
		if s, _, _ := testutil.Get(t, c, l[3]+"/healthz", nil); s != 200 {
			t.Fatalf("%s admin /healthz = %d", l[1], s)
		}
	}

	p.Signal(syscall.SIGINT)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("demo exit code %d", code)
	}
	if !strings.Contains(p.Stdout.String(), "demo stopped") {
		t.Fatalf("demo did not stop cleanly:\n%s", p.Stdout.String())
	}
}

// TestDemoCleansUpOnSIGHUP, as when its terminal closes: it stops cleanly
// and removes its temporary files (keyrings and cluster secret among them).
func TestDemoCleansUpOnSIGHUP(t *testing.T) {
	tmp := t.TempDir()
	p := start(t, []string{"TMPDIR=" + tmp}, "demo")
	testutil.Eventually(t, 60*time.Second, "demo up", func() bool { return len(demoLine.FindAllString(p.Stdout.String(), -1)) == 3 })
	p.Signal(syscall.SIGHUP)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("demo exit code %d after SIGHUP", code)
	}
	left, _ := os.ReadDir(tmp)
	if len(left) != 0 {
		t.Fatalf("demo left %d entries in TMPDIR", len(left))
	}
}
