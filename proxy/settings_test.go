package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tether-proxy/tether/proxy/config"
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
