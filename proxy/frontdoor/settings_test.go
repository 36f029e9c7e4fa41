package frontdoor

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
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
				if _, err := New(&config.Config{}, http.NotFoundHandler(), nil, WithHTTP1Server(HTTP1Server(c.value))); err == nil {
					t.Fatalf("New took http1 server %q", c.value)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg := &config.Config{Listeners: []config.Listener{{Address: "127.0.0.1:0"}}}
			s, err := New(cfg, http.NotFoundHandler(), nil, WithHTTP1Server(v))
			if err != nil {
				t.Fatal(err)
			}
			if own := s.ls[0].h1 != nil; own != c.wantOwn {
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

// TestHTTP2ServerSetting: --http2-server chooses who serves HTTP/2 (own,
// the default, or stdlib); any other value is refused with its name. Who
// answers is seen on the wire: the own server's SETTINGS name a 16 KiB
// largest frame, net/http's 1 MiB.
func TestHTTP2ServerSetting(t *testing.T) {
	cases := []struct {
		desc      string
		value     string
		wantFrame uint32
		wantErr   bool
	}{
		{desc: "default is the own server", value: "", wantFrame: 16 << 10},
		{desc: "stdlib", value: "stdlib", wantFrame: 1 << 20},
		{desc: "own", value: "own", wantFrame: 16 << 10},
		{desc: "case and spaces do not matter", value: " Own ", wantFrame: 16 << 10},
		{desc: "on is not a value", value: "on", wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			v, err := ParseHTTP2Server(c.value)
			if c.wantErr {
				if err == nil || !strings.Contains(err.Error(), c.value) {
					t.Fatalf("ParseHTTP2Server(%q) = %v, want an error naming the value", c.value, err)
				}
				if _, err := New(&config.Config{}, http.NotFoundHandler(), nil, WithHTTP2Server(HTTP2Server(c.value))); err == nil {
					t.Fatalf("New took http2 server %q", c.value)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			l := config.Listener{Address: "127.0.0.1:0"}
			l.Protocols = config.ProtocolsHttp2
			cfg := &config.Config{Listeners: []config.Listener{l}}
			s, err := New(cfg, http.NotFoundHandler(), nil, WithHTTP2Server(v))
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
