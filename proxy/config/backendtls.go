package config

// TLS to backends, beyond YARP's HttpClient keys (YARP leaves client
// certificates and custom roots to code): named in YARP's style and shaped
// like Kestrel's certificate settings.

// ClientCertificate is the certificate a cluster presents to backends that
// ask for one (mutual TLS): PEM files. Empty: none is presented.
type ClientCertificate struct {
	// Path is the certificate chain (PEM); KeyPath its private key (PEM).
	// Both or neither.
	Path    string
	KeyPath string
}

// CertificateAuthority is the trust for backend certificates. Empty: the
// system's roots.
type CertificateAuthority struct {
	// Path is a PEM bundle of CA certificates; backend certificates must
	// chain to one of them, instead of to the system's roots.
	Path string
}

// backendTLS checks a cluster's HttpClient TLS files exist; their contents
// are parsed when the data path is built (proxy.Compile reports errors there
// under the same paths).
func (v *validator) backendTLS(path string, c *HttpClient) {
	cc := &c.ClientCertificate
	if cc.Path != "" || cc.KeyPath != "" {
		v.file(path+".ClientCertificate.Path", cc.Path)
		v.file(path+".ClientCertificate.KeyPath", cc.KeyPath)
	}
	if ca := c.CertificateAuthority.Path; ca != "" {
		v.file(path+".CertificateAuthority.Path", ca)
		if c.DangerousAcceptAnyServerCertificate {
			v.warns = append(v.warns, path+".CertificateAuthority: has no effect while DangerousAcceptAnyServerCertificate is true (no backend certificate is checked)")
		}
	}
}
