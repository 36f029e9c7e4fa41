package config

import (
	"crypto/tls"
	"fmt"
	"strings"

	"github.com/tether-proxy/tether/proxy/config/tree"
)

// TLSVersions is .NET's SslProtocols: a list (["Tls12", "Tls13"]) or a
// comma-separated string ("Tls12, Tls13") of Tls (1.0), Tls11, Tls12 and
// Tls13, which must be contiguous; "None" or "Default" leave the choice to
// tether (TLS 1.2 and 1.3). Ssl2 and Ssl3 are refused.
type TLSVersions struct {
	// Min and Max are crypto/tls version numbers; both 0 for the default.
	Min, Max uint16
	// Set is true when the key was given.
	Set bool
}

var tlsVersionNames = []struct {
	name string
	v    uint16
}{{"Tls", tls.VersionTLS10}, {"Tls11", tls.VersionTLS11}, {"Tls12", tls.VersionTLS12}, {"Tls13", tls.VersionTLS13}}

// parseTLSVersions reads the names of n (a scalar or a list of scalars).
func parseTLSVersions(n *tree.Node) (TLSVersions, error) {
	var names []string
	switch n.Kind {
	case tree.Scalar:
		names = strings.Split(n.Text, ",")
	case tree.List:
		for _, e := range n.Vals {
			if e.Kind != tree.Scalar {
				return TLSVersions{}, fmt.Errorf("want TLS version names, got %s", e.Describe())
			}
			names = append(names, strings.Split(e.Text, ",")...)
		}
	default:
		return TLSVersions{}, fmt.Errorf("want a list of TLS versions, got %s", n.Describe())
	}
	var have [4]bool
	for _, name := range names {
		name = strings.TrimSpace(name)
		switch {
		case name == "", strings.EqualFold(name, "None"), strings.EqualFold(name, "Default"):
			continue
		case strings.EqualFold(name, "Ssl2"), strings.EqualFold(name, "Ssl3"):
			return TLSVersions{}, fmt.Errorf("%s is broken and not supported", name)
		}
		found := false
		for i, t := range tlsVersionNames {
			if strings.EqualFold(name, t.name) {
				have[i], found = true, true
			}
		}
		if !found {
			return TLSVersions{}, fmt.Errorf("unknown TLS version %q (want Tls12, Tls13, Tls11 or Tls)", name)
		}
	}
	out := TLSVersions{Set: true}
	for i, h := range have {
		switch {
		case !h:
		case out.Min == 0:
			out.Min, out.Max = tlsVersionNames[i].v, tlsVersionNames[i].v
		case out.Max != tlsVersionNames[i-1].v:
			return TLSVersions{}, fmt.Errorf("TLS versions must be contiguous (Go cannot offer %s without the versions between)", strings.TrimSpace(strings.Join(names, ", ")))
		default:
			out.Max = tlsVersionNames[i].v
		}
	}
	return out, nil
}

// Canonical HttpRequest.Version and VersionPolicy values after Load.
const (
	Version11                = "1.1"
	Version20                = "2.0"
	VersionOrLower           = "RequestVersionOrLower"
	VersionExact             = "RequestVersionExact"
	VersionOrHigher          = "RequestVersionOrHigher"
	defaultVersion           = Version20
	defaultVersionPolicy     = VersionOrLower
	versionPolicyExplanation = "want RequestVersionOrLower, RequestVersionExact or RequestVersionOrHigher"
)

// httpVersion checks HttpRequest.Version and VersionPolicy and rewrites
// them to the canonical values, YARP's defaults (2.0, OrLower) filled in.
// HTTP/3 is not spoken: version 3 with OrLower falls back to 2.0 with a
// warning (as .NET would on a network without QUIC); with another policy it
// is an error. Version 1.0 is sent as 1.1, with a warning.
func (v *validator) httpVersion(path string, r *HttpRequest) {
	policy := r.VersionPolicy
	switch {
	case policy == "":
		policy = defaultVersionPolicy
	case strings.EqualFold(policy, VersionOrLower):
		policy = VersionOrLower
	case strings.EqualFold(policy, VersionExact):
		policy = VersionExact
	case strings.EqualFold(policy, VersionOrHigher):
		policy = VersionOrHigher
	default:
		v.errorf(path+".VersionPolicy", "unknown value %q (%s)", r.VersionPolicy, versionPolicyExplanation)
	}
	version := defaultVersion
	switch s := strings.TrimSpace(r.Version); s {
	case "":
	case "1.1":
		version = Version11
	case "1", "1.0":
		version = Version11
		v.warns = append(v.warns, path+".Version: HTTP/1.0 is sent as HTTP/1.1")
	case "2", "2.0":
		version = Version20
	case "3", "3.0":
		if policy != VersionOrLower {
			v.errorf(path+".Version", "HTTP/3 is not supported (with %s there is no lower version to fall back to)", policy)
		} else {
			v.warns = append(v.warns, path+".Version: HTTP/3 is not supported; HTTP/2 and HTTP/1.1 are tried, as RequestVersionOrLower allows")
		}
	default:
		v.errorf(path+".Version", "unknown HTTP version %q (want 1.1, 2 or 3)", r.Version)
	}
	r.Version, r.VersionPolicy = version, policy
}
