package config

import (
	"fmt"
	"strings"
)

// DataProtection lets tether read the ASP.NET Data Protection key ring of a
// YARP fleet, so that YARP's Cookie and CustomHeader affinity values keep
// working across a migration (docs/YARP.md, package
// keyring/dataprotection). Only those two policies use it; tether's own
// values keep working alongside.
type DataProtection struct {
	// KeyRingPath is the directory of the fleet's XML key files
	// (PersistKeysToFileSystem). Required. tether only reads it and
	// re-reads it to see keys the fleet adds or revokes.
	KeyRingPath string
	// ApplicationDiscriminator is the YARP application's discriminator:
	// what it passed to SetApplicationName, or else its content root path
	// without a trailing slash ("/app"), as ASP.NET derives it. Required: a
	// different value opens nothing.
	ApplicationDiscriminator string
	// Certificate decrypts keys encrypted with ProtectKeysWithCertificate:
	// Path and KeyPath (PEM), or Path and Password (PKCS#12 .pfx). Needed
	// only for such keys.
	Certificate *DataProtectionCertificate
	// Certificates are more certificates that decrypt keys, for keys
	// encrypted before a certificate rotation (ASP.NET's
	// UnprotectKeysWithAnyCertificate). Each as Certificate.
	Certificates []DataProtectionCertificate
	// IssueYarpValues makes the Cookie and CustomHeader policies issue
	// values YARP opens (protected with the ring's default key) instead of
	// tether's own. Default false: tether opens YARP's values but issues
	// its own, which YARP nodes do not open.
	IssueYarpValues bool
}

// DataProtectionCertificate is the key ring's certificate with its private
// key.
type DataProtectionCertificate struct {
	Path     string // PEM certificate, or a .pfx file when KeyPath is empty. Required.
	KeyPath  string // PEM private key (unencrypted PKCS#8 or PKCS#1 RSA)
	Password string // of the .pfx; only without KeyPath
}

func (v *validator) dataProtection(c *Config) {
	d := c.DataProtection
	if d == nil {
		return
	}
	const p = "DataProtection"
	if d.KeyRingPath == "" {
		v.errorf(p+".KeyRingPath", "required: the directory of the YARP fleet's Data Protection key files")
	}
	if d.ApplicationDiscriminator == "" {
		v.errorf(p+".ApplicationDiscriminator", "required: the YARP app's SetApplicationName value, or its content root path if it never set one")
	}
	if d.Certificate != nil {
		v.dpCertificate(p+".Certificate", d.Certificate)
	}
	for i := range d.Certificates {
		v.dpCertificate(fmt.Sprintf("%s.Certificates[%d]", p, i), &d.Certificates[i])
	}
	// Say so when the section can change nothing: only the encrypted
	// policies read YARP's values.
	uses := false
	for _, cl := range c.ReverseProxy.Clusters {
		if cl != nil && cl.SessionAffinity.Enabled && usesDataProtection(cl.SessionAffinity.Policy) {
			uses = true
		}
	}
	for _, r := range c.ReverseProxy.Routes {
		if r != nil && r.SessionAffinity != nil && r.SessionAffinity.Enabled && usesDataProtection(r.SessionAffinity.Policy) {
			uses = true
		}
	}
	if !uses {
		v.warns = append(v.warns, p+": no cluster or route uses the Cookie or CustomHeader affinity policy, the only ones that read YARP's values; the section has no effect")
	}
}

func (v *validator) dpCertificate(path string, cert *DataProtectionCertificate) {
	v.file(path+".Path", cert.Path)
	if cert.KeyPath != "" {
		v.file(path+".KeyPath", cert.KeyPath)
		if cert.Password != "" {
			v.errorf(path+".Password", "applies to a .pfx (Path without KeyPath); PEM keys must be unencrypted")
		}
	}
}

func usesDataProtection(policy string) bool {
	return strings.EqualFold(policy, "Cookie") || strings.EqualFold(policy, "CustomHeader")
}
