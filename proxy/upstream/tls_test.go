package upstream

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func writeCA(t *testing.T, path string, serial int64) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "ca"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTLSFingerprintFollowsFileContents: a rotated CA file changes the
// fingerprint, so a reload builds a transport with the new roots.
func TestTLSFingerprintFollowsFileContents(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	writeCA(t, ca, 1)
	a, err := LoadTLS(TLSFiles{CAPath: ca})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := LoadTLS(TLSFiles{CAPath: ca})
	if a.Fingerprint != b.Fingerprint {
		t.Fatal("same files, different fingerprints")
	}
	writeCA(t, ca, 2)
	c, _ := LoadTLS(TLSFiles{CAPath: ca})
	if c.Fingerprint == a.Fingerprint {
		t.Fatal("rotated CA, same fingerprint")
	}
	if d, _ := LoadTLS(TLSFiles{CAPath: ca, Insecure: true}); d.Fingerprint == c.Fingerprint {
		t.Fatal("Insecure does not change the fingerprint")
	}
}

func TestTLSAddrAndServerName(t *testing.T) {
	for _, c := range []struct{ in, addr, name string }{
		{"api.example", "api.example:443", "api.example"},
		{"api.example:8443", "api.example:8443", "api.example"},
		{"[::1]", "[::1]:443", "::1"},
		{"[::1]:8443", "[::1]:8443", "::1"},
		{"10.0.0.1", "10.0.0.1:443", "10.0.0.1"},
	} {
		if got := TLSAddr(c.in); got != c.addr {
			t.Errorf("TLSAddr(%q) = %q, want %q", c.in, got, c.addr)
		}
		if got := ServerNameOf(c.in); got != c.name {
			t.Errorf("ServerNameOf(%q) = %q, want %q", c.in, got, c.name)
		}
	}
	if ServerNameOf("") != "" {
		t.Error("empty Host gives a name")
	}
}
