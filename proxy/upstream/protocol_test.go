package upstream

import (
	"crypto/tls"
	"testing"
)

func TestProtocolForFollowsDotNetVersionPolicies(t *testing.T) {
	cases := []struct {
		desc            string
		version, policy string
		want            Protocol
	}{
		{"1.1 or lower: HTTP/1.1 only", "1.1", "RequestVersionOrLower", Protocol{HTTP1: true}},
		{"1.1 exact: HTTP/1.1 only", "1.1", "RequestVersionExact", Protocol{HTTP1: true}},
		{"1.1 or higher: h2 by ALPN allowed", "1.1", "RequestVersionOrHigher", Protocol{HTTP1: true, HTTP2: true}},
		{"2.0 or lower (YARP's default): h2 by ALPN, else HTTP/1.1", "2.0", "RequestVersionOrLower", Protocol{HTTP1: true, HTTP2: true}},
		{"2.0 exact: h2 or h2c only", "2.0", "RequestVersionExact", Protocol{HTTP2: true, H2C: true}},
		{"2.0 or higher: h2 or h2c only (no HTTP/3)", "2.0", "RequestVersionOrHigher", Protocol{HTTP2: true, H2C: true}},
		{"unset (a cluster built in code): Go's h2 by ALPN", "", "", Protocol{HTTP1: true, HTTP2: true}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			if got := ProtocolFor(c.version, c.policy, 0, 0); got != c.want {
				t.Fatalf("ProtocolFor(%q, %q) = %+v, want %+v", c.version, c.policy, got, c.want)
			}
		})
	}
	if p := ProtocolFor("2.0", "RequestVersionOrLower", tls.VersionTLS13, tls.VersionTLS13); p.MinTLS != tls.VersionTLS13 || p.MaxTLS != tls.VersionTLS13 {
		t.Fatalf("TLS versions not kept: %+v", p)
	}
}
