package testutil

import (
	"crypto/x509"
	"path/filepath"
	"testing"
)

// CertFiles writes a SelfSignedCert for 127.0.0.1 and dnsNames to
// cert.pem and key.pem in a new temporary directory and returns the two
// file names and a pool that trusts the certificate.
func CertFiles(t testing.TB, dnsNames ...string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	certPEM, keyPEM, leaf := SelfSignedCert(t, dnsNames...)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	WriteFile(t, certFile, string(certPEM))
	WriteFile(t, keyFile, string(keyPEM))
	pool = x509.NewCertPool()
	pool.AddCert(leaf)
	return certFile, keyFile, pool
}
