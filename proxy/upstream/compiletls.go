package upstream

import (
	"errors"
	"net/url"
	"slices"
	"strings"

	"github.com/tether-proxy/tether/proxy/config"
)

// CompileTLS loads a cluster's backend TLS settings (CA bundle,
// client certificate) and works out each https destination's SNI: its Host
// setting when it has one, else its address's host. Connections are pooled
// by address, so two destinations sharing an address must agree on the
// name.
func CompileTLS(path string, c *config.Cluster, dests []*Destination) (*BackendTLS, map[string]string, config.Errors) {
	hc := &c.HttpClient
	var errs config.Errors
	bt, err := LoadTLS(TLSFiles{
		CAPath:   hc.CertificateAuthority.Path,
		CertPath: hc.ClientCertificate.Path,
		KeyPath:  hc.ClientCertificate.KeyPath,
		Insecure: hc.DangerousAcceptAnyServerCertificate,
	})
	if err != nil {
		field := path + ".HttpClient.ClientCertificate.Path"
		var fe *TLSFileError
		if errors.As(err, &fe) {
			switch fe.Field {
			case "CA":
				field = path + ".HttpClient.CertificateAuthority.Path"
			case "Key":
				field = path + ".HttpClient.ClientCertificate.KeyPath"
			}
		}
		errs = append(errs, config.FieldError{Path: field, Message: err.Error()})
	}
	type owner struct{ name, dest string }
	byAddr := map[string]owner{}
	sni := map[string]string{}
	for _, d := range dests {
		name := ServerNameOf(d.Host)
		for _, u := range []*url.URL{d.Address, d.HealthAddress} {
			if u == nil || u.Scheme != "https" {
				continue
			}
			addr := TLSAddr(u.Host)
			if o, ok := byAddr[addr]; ok && o.name != name {
				errs = append(errs, config.FieldError{Path: path + ".Destinations." + d.ID + ".Host",
					Message: "destination " + o.dest + " shares the address " + addr + " but sends another TLS server name (" +
						quoteOr(o.name) + " against " + quoteOr(name) + "): connections are pooled by address, so give both the same Host"})
				continue
			}
			byAddr[addr] = owner{name, d.ID}
			if name != "" {
				sni[addr] = name
			}
		}
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	return bt, sni, nil
}

func quoteOr(name string) string {
	if name == "" {
		return "the address's own host"
	}
	return `"` + name + `"`
}

// SNIKey is a stable form of the SNI map, so a reload that changes a
// destination's Host builds a new transport (pooled connections carry the
// old name).
func SNIKey(sni map[string]string) string {
	keys := make([]string, 0, len(sni))
	for a, n := range sni {
		keys = append(keys, a+"="+n)
	}
	slices.Sort(keys)
	return strings.Join(keys, ",")
}
