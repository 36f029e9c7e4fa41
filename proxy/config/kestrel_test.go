package config

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// certFiles writes files that exist (contents are not read by Parse).
func certFiles(t *testing.T) (dir string) {
	dir = t.TempDir()
	for _, f := range []string{"cert.pem", "key.pem", "site.pfx"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type listenerWant struct {
	Address, Protocols, Cert, Source string
	SelfSigned                       bool
}

func listenersOf(c *Config) []listenerWant {
	var out []listenerWant
	for _, l := range c.Listeners {
		w := listenerWant{Address: l.Address, Protocols: l.Protocols, Source: l.Source, SelfSigned: l.SelfSigned}
		if l.Certificate != nil {
			w.Cert = filepath.Base(l.Certificate.Path)
		}
		out = append(out, w)
	}
	return out
}

func TestKestrelListenerRules(t *testing.T) {
	dir := certFiles(t)
	pem := `{"Path": "` + filepath.Join(dir, "cert.pem") + `", "KeyPath": "` + filepath.Join(dir, "key.pem") + `"}`
	pfx := `{"Path": "` + filepath.Join(dir, "site.pfx") + `", "Password": "pw"}`
	cases := []struct {
		desc string
		in   string // top-level keys, minimalRP added
		env  map[string]string
		want []listenerWant
		warn string // a warning expected (substring)
	}{
		{desc: "Kestrel.Endpoints become listeners, http and https with a PEM certificate",
			in:   `"Kestrel": {"Endpoints": {"Http": {"Url": "http://*:8080"}, "Https": {"Url": "https://+:8443", "Certificate": ` + pem + `}}}`,
			want: []listenerWant{{Address: ":8080", Source: "Kestrel.Endpoints.Http"}, {Address: ":8443", Cert: "cert.pem", Source: "Kestrel.Endpoints.Https"}}},
		{desc: "a PKCS#12 certificate (Path and Password)",
			in:   `"Kestrel": {"Endpoints": {"Https": {"Url": "https://0.0.0.0:443", "Certificate": ` + pfx + `}}}`,
			want: []listenerWant{{Address: ":443", Cert: "site.pfx", Source: "Kestrel.Endpoints.Https"}}},
		{desc: "Kestrel.Certificates.Default serves an https endpoint without its own",
			in:   `"Kestrel": {"Certificates": {"Default": ` + pfx + `}, "Endpoints": {"Https": {"Url": "https://localhost:5001"}}}`,
			want: []listenerWant{{Address: "localhost:5001", Cert: "site.pfx", Source: "Kestrel.Endpoints.Https"}}},
		{desc: "Kestrel.Certificates.Default serves https Urls",
			in:   `"Urls": "https://*:5001", "Kestrel": {"Certificates": {"Default": ` + pem + `}}`,
			want: []listenerWant{{Address: ":5001", Cert: "cert.pem", Source: "Urls"}}},
		{desc: "https without any certificate: self-signed, with a warning",
			in:   `"Urls": "http://localhost:5000;https://localhost:5001"`,
			want: []listenerWant{{Address: "localhost:5000", Source: "Urls"}, {Address: "localhost:5001", SelfSigned: true, Source: "Urls"}},
			warn: "Urls https://localhost:5001: no certificate"},
		{desc: "Protocols per endpoint over EndpointDefaults, canonical spelling",
			in:   `"Kestrel": {"EndpointDefaults": {"Protocols": "http1"}, "Endpoints": {"A": {"Url": "http://*:1"}, "B": {"Url": "http://*:2", "Protocols": "Http1, Http2"}, "C": {"Url": "http://*:3", "Protocols": "HTTP2"}}}`,
			want: []listenerWant{{Address: ":1", Protocols: "Http1", Source: "Kestrel.Endpoints.A"}, {Address: ":2", Protocols: "Http1AndHttp2", Source: "Kestrel.Endpoints.B"}, {Address: ":3", Protocols: "Http2", Source: "Kestrel.Endpoints.C"}}},
		{desc: "HTTP/3 on https endpoints: Kestrel's names and the list form",
			in: `"Kestrel": {"Certificates": {"Default": ` + pem + `}, "Endpoints": {"A": {"Url": "https://*:1", "Protocols": "Http1AndHttp2AndHttp3"},
			  "B": {"Url": "https://*:2", "Protocols": "Http3"}, "C": {"Url": "https://*:3", "Protocols": "Http1, Http2, Http3"}, "D": {"Url": "https://*:4", "Protocols": "http1, http3"}}}`,
			want: []listenerWant{{Address: ":1", Protocols: "Http1AndHttp2AndHttp3", Cert: "cert.pem", Source: "Kestrel.Endpoints.A"}, {Address: ":2", Protocols: "Http3", Cert: "cert.pem", Source: "Kestrel.Endpoints.B"},
				{Address: ":3", Protocols: "Http1AndHttp2AndHttp3", Cert: "cert.pem", Source: "Kestrel.Endpoints.C"}, {Address: ":4", Protocols: "Http1AndHttp3", Cert: "cert.pem", Source: "Kestrel.Endpoints.D"}}},
		{desc: "HTTP/3 from EndpointDefaults on an http endpoint: dropped with a warning, as Kestrel does",
			in: `"Kestrel": {"Certificates": {"Default": ` + pem + `}, "EndpointDefaults": {"Protocols": "Http1AndHttp2AndHttp3"},
			  "Endpoints": {"Http": {"Url": "http://*:1"}, "Https": {"Url": "https://*:2"}}}`,
			want: []listenerWant{{Address: ":1", Protocols: "Http1AndHttp2", Source: "Kestrel.Endpoints.Http"}, {Address: ":2", Protocols: "Http1AndHttp2AndHttp3", Cert: "cert.pem", Source: "Kestrel.Endpoints.Https"}},
			warn: "Kestrel.Endpoints.Http: HTTP/3 (Kestrel.EndpointDefaults.Protocols) needs TLS and is not served on this http listener; Http1AndHttp2 is"},
		{desc: "HTTP/3 in tether's own listener form",
			in:   `"Listeners": [{"Address": ":5", "Protocols": "Http1AndHttp2AndHttp3", "AllowZeroRtt": true, "Certificate": ` + pem + `}]`,
			want: []listenerWant{{Address: ":5", Protocols: "Http1AndHttp2AndHttp3", Cert: "cert.pem"}}},
		{desc: "Listeners and Kestrel.Endpoints are bound together",
			in:   `"Listeners": [{"Address": "127.0.0.1:7"}], "Kestrel": {"Endpoints": {"A": {"Url": "http://127.0.0.1:8"}}}`,
			want: []listenerWant{{Address: "127.0.0.1:7"}, {Address: "127.0.0.1:8", Source: "Kestrel.Endpoints.A"}}},
		{desc: "Kestrel.Endpoints override Urls, with a warning",
			in:   `"Urls": "http://*:9", "Kestrel": {"Endpoints": {"A": {"Url": "http://*:8"}}}`,
			want: []listenerWant{{Address: ":8", Source: "Kestrel.Endpoints.A"}}, warn: "Urls: ignored because Listeners or Kestrel.Endpoints are set"},
		{desc: "ASPNETCORE_URLS when the file has no listeners",
			in: ``, env: map[string]string{"ASPNETCORE_URLS": "http://+:80;http://localhost:81"},
			want: []listenerWant{{Address: ":80", Source: "ASPNETCORE_URLS"}, {Address: "localhost:81", Source: "ASPNETCORE_URLS"}}},
		{desc: "the file's Urls beat ASPNETCORE_URLS, as in ASP.NET",
			in: `"Urls": "http://*:9"`, env: map[string]string{"ASPNETCORE_URLS": "http://+:80"},
			want: []listenerWant{{Address: ":9", Source: "Urls"}}},
		{desc: "Kestrel.Endpoints override ASPNETCORE_URLS",
			in: `"Kestrel": {"Endpoints": {"A": {"Url": "http://*:8"}}}`, env: map[string]string{"ASPNETCORE_URLS": "http://+:80"},
			want: []listenerWant{{Address: ":8", Source: "Kestrel.Endpoints.A"}}, warn: "ASPNETCORE_URLS: ignored"},
		{desc: "a host name other than localhost binds every interface, as in Kestrel",
			in:   `"Urls": "http://example.com:8080;http://[::]:81"`,
			want: []listenerWant{{Address: ":8080", Source: "Urls"}, {Address: ":81", Source: "Urls"}}},
		{desc: "no listener anywhere: :8080", in: ``, want: []listenerWant{{Address: ":8080"}}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			in := "{" + tc.in
			if tc.in != "" {
				in += ", "
			}
			in += minimalRP + "}"
			env := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			c, warns, err := ParseWith([]byte(in), "json", LoadOptions{LookupEnv: env})
			if err != nil {
				t.Fatal(err)
			}
			if got := listenersOf(c); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("listeners\n%+v\nwant\n%+v", got, tc.want)
			}
			if tc.warn != "" && !slices.ContainsFunc(warns, func(w string) bool { return strings.Contains(w, tc.warn) }) {
				t.Errorf("warnings %q lack %q", warns, tc.warn)
			}
		})
	}
}

func TestKestrelRefusals(t *testing.T) {
	dir := certFiles(t)
	pem := `{"Path": "` + filepath.Join(dir, "cert.pem") + `", "KeyPath": "` + filepath.Join(dir, "key.pem") + `"}`
	cases := []struct {
		desc, in, path, msg string
	}{
		{"Url required", `"Kestrel": {"Endpoints": {"A": {}}}`, "Kestrel.Endpoints.A.Url", "required"},
		{"unix sockets", `"Kestrel": {"Endpoints": {"A": {"Url": "http://unix:/tmp/s"}}}`, "Kestrel.Endpoints.A.Url", "unix sockets"},
		{"a path base", `"Urls": "http://*:80/app"`, "Urls", "path base"},
		{"HTTP/3 on an http Url", `"Kestrel": {"Endpoints": {"A": {"Url": "http://*:1", "Protocols": "Http1AndHttp2AndHttp3"}}}`, "Kestrel.Endpoints.A.Protocols", "HTTP/3 needs TLS"},
		{"HTTP/3 alone on an http Url", `"Kestrel": {"Endpoints": {"A": {"Url": "http://*:1", "Protocols": "Http3"}}}`, "Kestrel.Endpoints.A.Protocols", "HTTP/3 needs TLS"},
		{"HTTP/3 alone from EndpointDefaults on an http Url", `"Kestrel": {"EndpointDefaults": {"Protocols": "Http3"}, "Endpoints": {"A": {"Url": "http://*:1"}}}`, "Kestrel.EndpointDefaults.Protocols", "HTTP/3 needs TLS"},
		{"HTTP/3 on a cleartext listener", `"Listeners": [{"Address": ":1", "Protocols": "Http3"}]`, "Listeners[0].Protocols", "HTTP/3 needs TLS"},
		{"HTTP/3 without TLS 1.3", `"Kestrel": {"Endpoints": {"A": {"Url": "https://*:1", "Protocols": "Http1AndHttp2AndHttp3", "SslProtocols": ["Tls12"], "Certificate": ` + pem + `}}}`,
			"Kestrel.Endpoints.A.SslProtocols", "HTTP/3 needs TLS 1.3"},
		{"unknown protocol", `"Kestrel": {"EndpointDefaults": {"Protocols": "Http4"}}`, "Kestrel.EndpointDefaults.Protocols", "unknown protocol"},
		{"RequireCertificate: tether would let in clients Kestrel refuses", `"Kestrel": {"Endpoints": {"A": {"Url": "https://*:1", "ClientCertificateMode": "RequireCertificate", "Certificate": ` + pem + `}}}`,
			"Kestrel.Endpoints.A.ClientCertificateMode", "does not verify client certificates"},
		{"Sni on an http Url", `"Kestrel": {"Endpoints": {"A": {"Url": "http://*:1", "Sni": {"a.example": {}}}}}`, "Kestrel.Endpoints.A.Sni", "needs an https Url"},
		{"a bad Sni pattern", `"Kestrel": {"Endpoints": {"A": {"Url": "https://*:1", "Sni": {"a.*.example": {}}}}}`, "Kestrel.Endpoints.A.Sni.a.*.example", "want a host name"},
		{"certificate stores", `"Kestrel": {"Certificates": {"Default": {"Subject": "x", "Store": "My"}}}`, "Kestrel.Certificates.Default", "certificate stores"},
		{"missing certificate file", `"Kestrel": {"Endpoints": {"A": {"Url": "https://*:1", "Certificate": {"Path": "/nonexistent.pfx"}}}}`, "Kestrel.Endpoints.A.Certificate.Path", "does not exist"},
		{"encrypted PEM key", `"Kestrel": {"Endpoints": {"A": {"Url": "https://*:1", "Certificate": {"Path": "` + filepath.Join(dir, "cert.pem") + `", "KeyPath": "` + filepath.Join(dir, "key.pem") + `", "Password": "x"}}}}`,
			"Kestrel.Endpoints.A.Certificate.Password", "encrypted PEM keys"},
		{"two listeners on one address", `"Listeners": [{"Address": ":8"}], "Kestrel": {"Endpoints": {"A": {"Url": "http://*:8"}}}`, "Kestrel.Endpoints.A", "also bound by Listeners[0]"},
		{"Limits set differently in both", `"Limits": {"MaxRequestHeadersTotalSize": 1000}, "Kestrel": {"Limits": {"MaxRequestHeadersTotalSize": 2000}}`,
			"Kestrel.Limits.MaxRequestHeadersTotalSize", "differs from Limits.MaxRequestHeadersTotalSize"},
		{"a zero Kestrel duration is named as such", `"Kestrel": {"Limits": {"KeepAliveTimeout": "00:00:00"}}`, "Kestrel.Limits.KeepAliveTimeout", "greater than zero"},
		{"SslProtocols with a gap", `"Kestrel": {"EndpointDefaults": {"SslProtocols": ["Tls11", "Tls13"]}}`, "Kestrel.EndpointDefaults.SslProtocols", "contiguous"},
		{"SslProtocols Ssl3", `"Kestrel": {"EndpointDefaults": {"SslProtocols": "Ssl3"}}`, "Kestrel.EndpointDefaults.SslProtocols", "broken"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, _, err := ParseWith([]byte("{"+tc.in+", "+minimalRP+"}"), "json", LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
			wantFieldError(t, err, tc.path, tc.msg)
		})
	}
}

func TestKestrelLimitsAndOptions(t *testing.T) {
	in := `{"Kestrel": {
	  "Limits": {"MaxRequestHeadersTotalSize": 8192, "MaxRequestBodySize": 1000, "KeepAliveTimeout": "00:01:00",
	             "RequestHeadersTimeout": "00:00:05", "MaxConcurrentConnections": 100, "MaxRequestLineSize": 100},
	  "Endpoints": {"A": {"Url": "http://*:1", "SslProtocols": ["Tls12", "Tls13"], "ClientCertificateMode": "allowcertificate"}}},
	 "ReverseProxy": {
	  "Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/"}},
	             "r2": {"ClusterId": "c1", "Match": {"Path": "/big"}, "MaxRequestBodySize": -1}},
	  "Clusters": {"c1": {"Destinations": {"d1": {"Address": "http://a.example:80"}}}}}}`
	c, warns, err := ParseWith([]byte(in), "json", LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	l := c.Limits
	if l.MaxRequestHeadersTotalSize != 8192 || l.MaxRequestBodySize != 1000 || l.KeepAliveTimeout.Duration != time.Minute ||
		l.RequestHeadersTimeout.Duration != 5*time.Second || l.MaxConcurrentConnections != 100 {
		t.Errorf("Limits %+v", l)
	}
	if r := c.ReverseProxy.Routes; r["r1"].MaxRequestBodySize != 1000 || r["r2"].MaxRequestBodySize != -1 {
		t.Errorf("route body limits %d, %d; want the server's 1000 and the route's own -1", r["r1"].MaxRequestBodySize, r["r2"].MaxRequestBodySize)
	}
	e := c.Listeners[0]
	if e.SslProtocols != (TLSVersions{Min: tls.VersionTLS12, Max: tls.VersionTLS13, Set: true}) || e.ClientCertificateMode != "AllowCertificate" {
		t.Errorf("endpoint options %+v", e.KestrelEndpointDefaults)
	}
	if !slices.Contains(warns, "Kestrel.Limits.MaxRequestLineSize: accepted but not implemented by tether") {
		t.Errorf("warnings %q", warns)
	}
}

func TestKestrelRelativeCertificatePathsFollowTheConfigFile(t *testing.T) {
	dir := certFiles(t)
	path := filepath.Join(dir, "appsettings.json")
	js := `{"Kestrel": {"Endpoints": {"A": {"Url": "https://*:1", "Certificate": {"Path": "site.pfx"}}}}, ` + minimalRP + `}`
	if err := os.WriteFile(path, []byte(js), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _, err := LoadWith(path, LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Listeners[0].Certificate.Path; got != filepath.Join(dir, "site.pfx") {
		t.Errorf("certificate path %q", got)
	}
}

func TestKestrelSniEntries(t *testing.T) {
	dir := certFiles(t)
	pfx := `{"Path": "` + filepath.Join(dir, "site.pfx") + `"}`
	in := `{"Kestrel": {"Endpoints": {"Https": {"Url": "https://*:443", "Protocols": "Http1AndHttp2", "SslProtocols": ["Tls12", "Tls13"], "Certificate": ` + pfx + `,
	  "Sni": {"A.Example.com": {"Protocols": "Http1", "Certificate": ` + pfx + `}, "*.example.com": {"SslProtocols": ["Tls13"]}, "*": {}}}}}, ` + minimalRP + `}`
	c, _, err := ParseWith([]byte(in), "json", LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	sni := c.Listeners[0].Sni
	if len(sni) != 3 {
		t.Fatalf("Sni %+v", sni)
	}
	byPattern := map[string]SniRule{}
	for _, r := range sni {
		byPattern[r.Pattern] = r
	}
	a, w, any := byPattern["a.example.com"], byPattern["*.example.com"], byPattern["*"]
	if a.Protocols != ProtocolsHttp1 || a.Certificate == nil || a.SslProtocols.Min != tls.VersionTLS12 {
		t.Errorf("a.example.com: %+v", a)
	}
	if w.Protocols != ProtocolsHttp1AndHttp2 || w.Certificate != nil || w.SslProtocols.Min != tls.VersionTLS13 {
		t.Errorf("*.example.com: %+v", w)
	}
	if any.Protocols != ProtocolsHttp1AndHttp2 || any.Certificate != nil {
		t.Errorf("*: %+v", any)
	}
}

func TestAllowZeroRtt(t *testing.T) {
	dir := certFiles(t)
	pem := `{"Path": "` + filepath.Join(dir, "cert.pem") + `", "KeyPath": "` + filepath.Join(dir, "key.pem") + `"}`
	in := `{"Listeners": [{"Address": ":5", "Protocols": "Http1AndHttp2AndHttp3", "AllowZeroRtt": true, "Certificate": ` + pem + `}],
	  "Kestrel": {"Endpoints": {"A": {"Url": "https://*:6", "Protocols": "Http3", "AllowZeroRtt": true, "Certificate": ` + pem + `},
	    "B": {"Url": "https://*:7", "AllowZeroRtt": true, "Certificate": ` + pem + `}}}, ` + minimalRP + `}`
	c, warns, err := ParseWith([]byte(in), "json", LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, true, true} {
		if got := c.Listeners[i].AllowZeroRtt; got != want {
			t.Errorf("%s: AllowZeroRtt %v, want %v", c.Listeners[i].Source, got, want)
		}
	}
	if !slices.Contains(warns, "Kestrel.Endpoints.B.AllowZeroRtt: has no effect without HTTP/3 in Protocols") {
		t.Errorf("warnings %q lack the one for B", warns)
	}
}
