package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/internal/sockio"
)

// TestHTTP1ServerSetting: --http1-server chooses who serves cleartext
// HTTP/1.1 (own, the default, or stdlib); any other value is refused with
// its name.
func TestHTTP1ServerSetting(t *testing.T) {
	cases := []struct {
		desc    string
		value   string
		wantOwn bool
		wantErr bool
	}{
		{desc: "default is the own loop", value: "", wantOwn: true},
		{desc: "own", value: "own", wantOwn: true},
		{desc: "stdlib is net/http's server", value: "stdlib"},
		{desc: "case and spaces do not matter", value: " StdLib ", wantOwn: false},
		{desc: "off is not a value", value: "off", wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			v, err := ParseHTTP1Server(c.value)
			if c.wantErr {
				if err == nil || !strings.Contains(err.Error(), c.value) {
					t.Fatalf("ParseHTTP1Server(%q) = %v, want an error naming the value", c.value, err)
				}
				if _, err := NewServer(&config.Config{}, http.NotFoundHandler(), nil, WithHTTP1Server(HTTP1Server(c.value))); err == nil {
					t.Fatalf("NewServer took http1 server %q", c.value)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg := &config.Config{Listeners: []config.Listener{{Address: "127.0.0.1:0"}}}
			s, err := NewServer(cfg, http.NotFoundHandler(), nil, WithHTTP1Server(v))
			if err != nil {
				t.Fatal(err)
			}
			if own := s.h1[0] != nil; own != c.wantOwn {
				t.Fatalf("own loop on = %v, want %v", own, c.wantOwn)
			}
		})
	}
}

// TestWriteYieldSetting: --write-yield auto (the default) yields on one P
// only; on and off decide for any number; any other value is refused with
// its name, and SetWriteYield applies the value to the process.
func TestWriteYieldSetting(t *testing.T) {
	defer sockio.SetWriteYield(sockio.WriteYield())
	for _, tc := range []struct {
		value string
		procs int
		want  bool
	}{
		{"", 1, true},
		{"", 2, false},
		{"auto", 1, true},
		{"auto", 64, false},
		{"on", 1, true},
		{"ON", 8, true},
		{"off", 1, false},
		{"off", 8, false},
	} {
		v, err := ParseWriteYield(tc.value)
		if err != nil {
			t.Fatalf("ParseWriteYield(%q): %v", tc.value, err)
		}
		if got := yieldSetting(v, tc.procs); got != tc.want {
			t.Errorf("--write-yield %q with %d Ps: %v, want %v", tc.value, tc.procs, got, tc.want)
		}
	}
	for _, bad := range []string{"maybe", "1", "true"} {
		if _, err := ParseWriteYield(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseWriteYield(%q) = %v, want an error naming it", bad, err)
		}
		if err := SetWriteYield(WriteYield(bad)); err == nil {
			t.Errorf("SetWriteYield(%q) took it", bad)
		}
	}
	for _, v := range []WriteYield{WriteYieldOn, WriteYieldOff, WriteYieldOn} {
		if err := SetWriteYield(v); err != nil {
			t.Fatal(err)
		}
		if got := sockio.WriteYield(); got != (v == WriteYieldOn) {
			t.Fatalf("SetWriteYield(%s): yield %v", v, got)
		}
	}
}

// TestQueryReencodingFollowsGODEBUG: with Go's GODEBUG urlmaxqueryparams
// set, httputil.ReverseProxy re-encodes every query it forwards; the
// direct path (requests without a body) then leaves them to it, so a GET
// and a POST reach the backend with the same query, in every server mode.
// Run in a child process: GODEBUG is read at start.
func TestQueryReencodingFollowsGODEBUG(t *testing.T) {
	if want, ok := os.LookupEnv("TETHER_TEST_QUERY_WANT"); ok {
		queryReencodingChild(t, want)
		return
	}
	cases := []struct{ desc, godebug, want string }{
		{"Go's default: the query as the client sent it", "", "b=2&a=1"},
		{"urlmaxqueryparams set: re-encoded on every path", "urlmaxqueryparams=100", "a=1&b=2"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestQueryReencodingFollowsGODEBUG$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), "GODEBUG="+c.godebug, "TETHER_TEST_QUERY_WANT="+c.want)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--- PASS") {
				t.Fatalf("child with GODEBUG=%q: %v\n%s", c.godebug, err, out)
			}
		})
	}
}

func queryReencodingChild(t *testing.T, want string) {
	var mu sync.Mutex
	var got []string
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.RawQuery)
		mu.Unlock()
	})
	forEachMode(t, func(t *testing.T, m serverMode) {
		e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			var body io.Reader
			if method == http.MethodPost {
				body = strings.NewReader("x")
			}
			mu.Lock()
			got = nil
			mu.Unlock()
			if resp, _ := e.mustDo(method, "/q?b=2&a=1", body, nil); resp.StatusCode != 200 {
				t.Fatalf("%s: %d", method, resp.StatusCode)
			}
			mu.Lock()
			if len(got) != 1 || got[0] != method+" "+want {
				t.Errorf("the backend saw %q, want %q", got, method+" "+want)
			}
			mu.Unlock()
		}
	})
}

// TestHTTP2ServerSetting: --http2-server chooses who serves HTTP/2 (stdlib,
// the default, or own); any other value is refused with its name. Who
// answers is seen on the wire: the own server's SETTINGS name a 16 KiB
// largest frame, net/http's 1 MiB.
func TestHTTP2ServerSetting(t *testing.T) {
	cases := []struct {
		desc      string
		value     string
		wantFrame uint32
		wantErr   bool
	}{
		{desc: "default is net/http's server", value: "", wantFrame: 1 << 20},
		{desc: "stdlib", value: "stdlib", wantFrame: 1 << 20},
		{desc: "own", value: "own", wantFrame: 16 << 10},
		{desc: "case and spaces do not matter", value: " Own ", wantFrame: 16 << 10},
		{desc: "on is not a value", value: "on", wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			if c.value == "" && defaultHTTP2 != HTTP2Stdlib {
				t.Skip("TETHER_TEST_HTTP2_SERVER changes the default")
			}
			v, err := ParseHTTP2Server(c.value)
			if c.wantErr {
				if err == nil || !strings.Contains(err.Error(), c.value) {
					t.Fatalf("ParseHTTP2Server(%q) = %v, want an error naming the value", c.value, err)
				}
				if _, err := NewServer(&config.Config{}, http.NotFoundHandler(), nil, WithHTTP2Server(HTTP2Server(c.value))); err == nil {
					t.Fatalf("NewServer took http2 server %q", c.value)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			l := config.Listener{Address: "127.0.0.1:0"}
			l.Protocols = config.ProtocolsHttp2
			cfg := &config.Config{Listeners: []config.Listener{l}}
			s, err := NewServer(cfg, http.NotFoundHandler(), nil, WithHTTP2Server(v))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Start(); err != nil {
				t.Fatal(err)
			}
			defer s.Shutdown(context.Background())
			conn, err := net.Dial("tcp", s.Addrs()[0].String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
				t.Fatal(err)
			}
			fr := http2.NewFramer(conn, conn)
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			sf, ok := f.(*http2.SettingsFrame)
			if !ok {
				t.Fatalf("first frame %v, want SETTINGS", f)
			}
			if got, _ := sf.Value(http2.SettingMaxFrameSize); got != c.wantFrame {
				t.Fatalf("SETTINGS_MAX_FRAME_SIZE = %d, want %d", got, c.wantFrame)
			}
		})
	}
}
