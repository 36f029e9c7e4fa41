package config

import (
	"crypto"
	"crypto/tls"
	"errors"
	"fmt"
	"os"

	"software.sslmate.com/src/go-pkcs12"
)

// LoadCertificate reads the certificate c names: PEM files when KeyPath is
// set, else a PKCS#12 (.pfx) file opened with Password, as Kestrel reads
// its Certificates entries. A PKCS#12 file must hold the private key and
// its certificate; further certificates are the chain, sent in its order.
func LoadCertificate(c *Certificate) (*tls.Certificate, error) {
	if c.KeyPath != "" {
		cert, err := tls.LoadX509KeyPair(c.Path, c.KeyPath)
		if err != nil {
			return nil, fmt.Errorf("loading %s and %s: %v", c.Path, c.KeyPath, err)
		}
		return &cert, nil
	}
	data, err := os.ReadFile(c.Path)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %v", c.Path, err)
	}
	key, leaf, chain, err := pkcs12.DecodeChain(data, c.Password)
	if errors.Is(err, pkcs12.ErrIncorrectPassword) {
		return nil, fmt.Errorf("loading %s: wrong Password", c.Path)
	} else if err != nil {
		return nil, fmt.Errorf("loading %s as PKCS#12 (a PEM certificate needs KeyPath): %v", c.Path, err)
	}
	cert := &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
	for _, ca := range chain {
		cert.Certificate = append(cert.Certificate, ca.Raw)
	}
	// Refuse a key that is not the certificate's, as LoadX509KeyPair does.
	signer, ok := key.(crypto.Signer)
	pub, ok2 := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !ok2 || !pub.Equal(signer.Public()) {
		return nil, fmt.Errorf("loading %s: the private key does not match the certificate", c.Path)
	}
	return cert, nil
}
