package forwarded

import (
	"net"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// fixedTrace is a valid trace id.
const fixedTrace = "0123456789abcdef0123456789abcdef"

func TestTrustSet(t *testing.T) {
	ts, bad := ParseTrusted([]string{"10.0.0.1", "192.168.0.0/16", "::1", "nonsense"})
	if len(bad) != 1 || bad[3] != "nonsense" {
		t.Fatalf("bad = %v", bad)
	}
	cases := []struct {
		desc string
		host string
		want bool
	}{
		{desc: "exact address", host: "10.0.0.1", want: true},
		{desc: "other address", host: "10.0.0.2"},
		{desc: "inside CIDR", host: "192.168.3.4", want: true},
		{desc: "IPv6 loopback", host: "::1", want: true},
		{desc: "IPv4-mapped IPv6 matches the IPv4 entry", host: "::ffff:10.0.0.1", want: true},
		{desc: "not an IP", host: "example.com"},
	}
	for _, c := range cases {
		if got := ts.Trusts(c.host); got != c.want {
			t.Errorf("%s: trusts(%q) = %v", c.desc, c.host, got)
		}
	}
	if (&Trust{}).contains(netip.Addr{}) {
		t.Error("invalid address trusted")
	}
}

func TestTraceIDFormat(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		id := NewTraceID()
		if !ValidTraceID(id) || seen[id] {
			t.Fatalf("trace id %q invalid or repeated", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "0123456789ABCDEF0123456789ABCDEF", fixedTrace + "0", "g123456789abcdef0123456789abcdef"} {
		if ValidTraceID(bad) {
			t.Errorf("ValidTraceID(%q) = true", bad)
		}
	}
}

func FuzzTraceID(f *testing.F) {
	f.Add(fixedTrace)
	f.Add("")
	f.Add("\x00\xff")
	f.Fuzz(func(t *testing.T, s string) {
		if ValidTraceID(s) && (len(s) != 32 || strings.ToLower(s) != s) {
			t.Fatalf("accepted %q", s)
		}
	})
}

func FuzzParseTrusted(f *testing.F) {
	f.Add("10.0.0.0/8", "127.0.0.1")
	f.Add("::1", "::ffff:1.2.3.4")
	f.Add("garbage", "")
	f.Fuzz(func(t *testing.T, entry, host string) {
		ts, _ := ParseTrusted([]string{entry})
		_ = ts.Trusts(host)
	})
}

// portString is strconv.Itoa, whatever the order of the ports it is asked.
func TestPortString(t *testing.T) {
	for _, p := range []int{8080, 8080, 443, 8080, 0, 65535, 443} {
		if got := portString(p); got != strconv.Itoa(p) {
			t.Fatalf("portString(%d) = %q", p, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { portString(8443) }); n != 0 {
		t.Errorf("portString of the same port allocates %.0f times", n)
	}
}

func FuzzClientPort(f *testing.F) {
	f.Add("example.com:8080")
	f.Add("[::1]")
	f.Add("[::1]:443")
	f.Fuzz(func(t *testing.T, host string) {
		req := httptest.NewRequest("GET", "/", nil)
		req.Host = host
		if p := clientPort(req, "http"); p == "" {
			t.Fatalf("empty port for %q", host)
		}
	})
}

// hostOfSplit is what HostOf returns, by net.SplitHostPort.
func hostOfSplit(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}

func TestHostOfAsSplitHostPort(t *testing.T) {
	for _, addr := range []string{
		"127.0.0.1:54321", "10.0.0.1:", ":80", ":", "", "example.com:8080",
		"127.0.0.1", "::1", "a:b:c", "1.2.3.4:5:6",
		"[::1]:443", "[fe80::1%eth0]:80", "[::1]", "[::1]:", "[]:80", "[::1]x:80",
		"[::1]:80:90", "[[::1]:80", "[::1]]:80", "[::1:80", "::1]:80", "a[b:80",
		"a]b:80", "[", "]", "[:", ":]", "@", "/tmp/sock", "pipe",
	} {
		if got, want := HostOf(addr), hostOfSplit(addr); got != want {
			t.Errorf("HostOf(%q) = %q, SplitHostPort gives %q", addr, got, want)
		}
	}
}

func FuzzHostOf(f *testing.F) {
	for _, s := range []string{"127.0.0.1:54321", "[::1]:443", "::1", "a:b", "[::1]]:80", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		if got, want := HostOf(addr), hostOfSplit(addr); got != want {
			t.Fatalf("HostOf(%q) = %q, SplitHostPort gives %q", addr, got, want)
		}
	})
}
