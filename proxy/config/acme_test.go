package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAcmeListenerKeyIsCheckedField(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	cases := []struct {
		desc, acme, extra, want string
	}{
		{"a complete block is accepted", `{"Directory": "https://acme.test/dir", "Email": "ops@example.com", "Domains": ["WWW.Example.com."]}`, "", ""},
		{"Directory is required", `{"Domains": ["a.example.com"]}`, "", "Listeners[0].Acme.Directory: required"},
		{"Directory must be https", `{"Directory": "http://acme.test/dir", "Domains": ["a.example.com"]}`, "", "Listeners[0].Acme.Directory: \"http://acme.test/dir\": want an https URL"},
		{"Domains are required", `{"Directory": "https://acme.test/dir"}`, "", "Listeners[0].Acme.Domains: required"},
		{"wildcards need DNS-01", `{"Directory": "https://acme.test/dir", "Domains": ["*.example.com"]}`, "", "wildcard names need the DNS-01 challenge"},
		{"a name twice", `{"Directory": "https://acme.test/dir", "Domains": ["a.example.com", "A.example.com"]}`, "", "\"a.example.com\" is listed twice"},
		{"a bad email", `{"Directory": "https://acme.test/dir", "Email": "ops", "Domains": ["a.example.com"]}`, "", "Listeners[0].Acme.Email"},
		{"a CA file without PEM", `{"Directory": "https://acme.test/dir", "CA": "` + notPEM + `", "Domains": ["a.example.com"]}`, "", "holds no PEM certificate"},
		{"not with Certificate", `{"Directory": "https://acme.test/dir", "Domains": ["a.example.com"]}`, `, "Certificate": {"Path": "c.pem", "KeyPath": "k.pem"}`, "from Certificate or from Acme, not both"},
	}
	for _, tc := range cases {
		js := `{"Listeners": [{"Address": ":8443", "Acme": ` + tc.acme + tc.extra + `}], "ReverseProxy": {}}`
		cfg, _, err := Parse([]byte(js), "json")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.desc, err)
		case tc.want == "" && cfg.Listeners[0].Acme.Domains[0] != "www.example.com":
			t.Errorf("%s: domain kept as %q, want it lower-cased without the final dot", tc.desc, cfg.Listeners[0].Acme.Domains[0])
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error with %q", tc.desc, err, tc.want)
		}
	}
}
