package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certFiles are the PEM files of the one certificate every HTTPS
// listener of the race serves: cert (the certificate), key (its ECDSA
// P-256 private key) and combined (both, as HAProxy's crt wants them).
type certFiles struct {
	cert, key, combined string
}

// writeCert makes a self-signed ECDSA P-256 certificate for 127.0.0.1 and
// localhost in dir.
func writeCert(dir string) (certFiles, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return certFiles{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()),
		Subject:      pkix.Name{CommonName: "localhost", Organization: []string{"benchrace"}},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(30 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return certFiles{}, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return certFiles{}, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	f := certFiles{cert: filepath.Join(dir, "cert.pem"), key: filepath.Join(dir, "key.pem"), combined: filepath.Join(dir, "combined.pem")}
	for path, b := range map[string][]byte{f.cert: certPEM, f.key: keyPEM, f.combined: append(append([]byte{}, certPEM...), keyPEM...)} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return certFiles{}, err
		}
	}
	return f, nil
}
