package config

import (
	"crypto/x509"
	"net/url"
	"os"
	"slices"
	"strings"
)

// Acme asks an ACME directory (Let's Encrypt, or any RFC 8555 CA) for a
// listener's certificate instead of reading files. The cluster obtains it
// once (its leader), keeps it in the replicated state and every node serves
// it; HTTP-01 and TLS-ALPN-01 challenges are answered by whichever node the
// CA reaches.
type Acme struct {
	// Directory is the ACME directory URL (https). Required. Let's
	// Encrypt's: https://acme-v02.api.letsencrypt.org/directory.
	Directory string
	// Email is the account's contact address, for the CA's expiry and
	// incident mail. Optional.
	Email string
	// Domains are the names on the certificate (one certificate, one
	// order; lower-cased, no wildcards: HTTP-01 and TLS-ALPN-01 cannot
	// prove them). Required.
	Domains []string
	// CA is a PEM bundle to trust the directory with instead of the
	// system's roots (a private CA, a test CA). Optional.
	CA string
}

// Name identifies the certificate an Acme block asks for: the directory
// and the sorted domains. Listeners asking for the same share it.
func (a *Acme) Name() string {
	d := slices.Clone(a.Domains)
	slices.Sort(d)
	return a.Directory + " " + strings.Join(d, ",")
}

func (v *validator) acme(path string, l *Listener) {
	a := l.Acme
	if l.Certificate != nil {
		v.errorf(path, "a listener takes its certificate from Certificate or from Acme, not both")
	}
	if a.Directory == "" {
		v.errorf(path+".Directory", "required (e.g. https://acme-v02.api.letsencrypt.org/directory)")
	} else if u, err := url.Parse(a.Directory); err != nil || u.Scheme != "https" || u.Host == "" {
		v.errorf(path+".Directory", "%q: want an https URL", a.Directory)
	}
	if a.Email != "" && (!strings.Contains(a.Email, "@") || strings.ContainsAny(a.Email, " \t\r\n,")) {
		v.errorf(path+".Email", "%q is not an email address", a.Email)
	}
	if len(a.Domains) == 0 {
		v.errorf(path+".Domains", "required: at least one name")
	}
	seen := map[string]bool{}
	for i, d := range a.Domains {
		d = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(d)), ".")
		a.Domains[i] = d
		switch {
		case strings.Contains(d, "*"):
			v.errorf(path+".Domains", "%q: wildcard names need the DNS-01 challenge, which tether does not answer", d)
		case !validDomain(d):
			v.errorf(path+".Domains", "%q is not a DNS name", d)
		case seen[d]:
			v.errorf(path+".Domains", "%q is listed twice", d)
		}
		seen[d] = true
	}
	if a.CA != "" {
		b, err := os.ReadFile(a.CA)
		if err != nil {
			v.errorf(path+".CA", "%v", err)
		} else if !x509.NewCertPool().AppendCertsFromPEM(b) {
			v.errorf(path+".CA", "%q holds no PEM certificate", a.CA)
		}
	}
	if len(l.Sni) > 0 {
		v.errorf(path, "Sni entries are not supported on an Acme listener")
	}
}

// validDomain reports whether d is a DNS name of letters, digits and
// hyphens, with at least two labels of at most 63 bytes.
func validDomain(d string) bool {
	if len(d) == 0 || len(d) > 253 {
		return false
	}
	labels := strings.Split(d, ".")
	if len(labels) < 2 {
		return false
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range []byte(l) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
