package dataprotection

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"software.sslmate.com/src/go-pkcs12"
)

// Certificate is an X.509 certificate with its RSA private key: what
// ASP.NET's ProtectKeysWithCertificate encrypted the key ring to, needed
// to read certificate-encrypted keys.
type Certificate struct {
	Leaf *x509.Certificate
	Key  *rsa.PrivateKey
}

// Thumbprint is the certificate's SHA-1 thumbprint (upper-case hex), as
// ASP.NET and Windows name certificates.
func (c *Certificate) Thumbprint() string { return thumbprint(c.Leaf.Raw) }

// LoadCertificate reads a certificate with its private key: PEM files
// (certPath and keyPath; the key PKCS#8, PKCS#1 or an RSA key block) when
// keyPath is set, else a PKCS#12 (.pfx) file at certPath protected by
// password (which may be empty).
func LoadCertificate(certPath, keyPath, password string) (*Certificate, error) {
	if keyPath != "" {
		return loadPEM(certPath, keyPath)
	}
	data, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	key, leaf, _, err := pkcs12.DecodeChain(data, password)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certPath, err)
	}
	return newCertificate(certPath, leaf, key)
}

func loadPEM(certPath, keyPath string) (*Certificate, error) {
	cdata, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	var leaf *x509.Certificate
	for rest := cdata; leaf == nil; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return nil, fmt.Errorf("%s: no CERTIFICATE PEM block", certPath)
		}
		if b.Type == "CERTIFICATE" {
			if leaf, err = x509.ParseCertificate(b.Bytes); err != nil {
				return nil, fmt.Errorf("%s: %w", certPath, err)
			}
		}
	}
	kdata, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	var key any
	for rest := kdata; key == nil; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return nil, fmt.Errorf("%s: no PRIVATE KEY PEM block", keyPath)
		}
		switch b.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		case "ENCRYPTED PRIVATE KEY":
			return nil, fmt.Errorf("%s: encrypted PEM keys are not supported; use a .pfx with Password instead", keyPath)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", keyPath, err)
		}
	}
	return newCertificate(certPath, leaf, key)
}

func newCertificate(path string, leaf *x509.Certificate, key any) (*Certificate, error) {
	rk, ok := key.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: the private key is %T; ASP.NET's certificate key encryption needs RSA", path, key)
	}
	pub, ok := leaf.PublicKey.(*rsa.PublicKey)
	if !ok || !pub.Equal(&rk.PublicKey) {
		return nil, errors.New(path + ": the private key does not belong to the certificate")
	}
	return &Certificate{Leaf: leaf, Key: rk}, nil
}
