package dataprotection

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// aspnetPayload is what ASP.NET's Protect(string) returned for "This is a
// secret." under the purpose "Test trimming" (no application
// discriminator) with the key ring of testdata/aspnet-cert-ring; see
// testdata/README.md for the source.
const aspnetPayload = "CfDJ8IjUFZwXRKtJrjntLzap6-OgblGi63sK6HDtOtu-IVhtuoLSTJl4fIbwX4vCtc8fefqPrr41QzGjHXwP-1HaCi9qlJFjvaloQ5KFPxBO2s-s1cAK9I5kl-lfjhyYrEtJRNtvgawKREAp2cZ9udM_Kog"

// aspnetCertPFX writes the test certificate of testdata/README.md as a
// .pfx file and returns its path.
func aspnetCertPFX(t *testing.T) string {
	t.Helper()
	b64, err := os.ReadFile("testdata/aspnet-cert.pfx.b64")
	if err != nil {
		t.Fatal(err)
	}
	der, err := decodeB64(string(b64))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "cert.pfx")
	if err := os.WriteFile(p, der, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestUnprotectsPayloadMadeByASPNETWithCertificateEncryptedRing(t *testing.T) {
	cert, err := LoadCertificate(aspnetCertPFX(t), "", "password")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open("testdata/aspnet-cert-ring", Options{Certificates: []*Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	if w := r.Warnings(); len(w) > 0 {
		t.Fatalf("warnings: %v", w)
	}
	data, err := base64.RawURLEncoding.DecodeString(aspnetPayload)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := r.Protector("Test trimming").Unprotect(data)
	if err != nil {
		t.Fatal(err)
	}
	if string(pt) != "This is a secret." {
		t.Fatalf("unprotected %q", pt)
	}
	// Other purposes, and an application discriminator in front, must fail.
	for _, p := range [][]string{{"Test trimming", "x"}, {"app", "Test trimming"}, {"test trimming"}} {
		if _, err := r.Protector(p...).Unprotect(data); err != ErrInvalid {
			t.Errorf("purposes %q: err %v, want ErrInvalid", p, err)
		}
	}
	// And what tether protects with that ring opens again.
	prot, err := r.Protector("Test trimming").Protect([]byte("round trip"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(base64.RawURLEncoding.EncodeToString(prot), "CfDJ8IjUFZwXRKtJrjntLzap6") {
		t.Errorf("payload does not start with the magic header and the key id")
	}
	if pt, err := r.Protector("Test trimming").Unprotect(prot); err != nil || string(pt) != "round trip" {
		t.Fatalf("round trip: %q, %v", pt, err)
	}
}

func TestRingWhoseKeysAllNeedAMissingCertificateIsRefused(t *testing.T) {
	_, err := Open("testdata/aspnet-cert-ring", Options{})
	if err == nil || !strings.Contains(err.Error(), "none of the 1 keys can be used") || !strings.Contains(err.Error(), "DataProtection.Certificate") {
		t.Fatalf("err %v, want one naming DataProtection.Certificate", err)
	}
}

func TestKeyNeedingAMissingCertificateIsUnusableWithAClearError(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile("testdata/aspnet-cert-ring/key-9c15d488-4417-49ab-ae39-ed2f36a9ebe3.xml")
	if err != nil {
		t.Fatal(err)
	}
	testutil.WriteFile(t, filepath.Join(dir, "key-cert.xml"), string(b))
	testutil.WriteFile(t, filepath.Join(dir, "key-a.xml"), keyXML(idA, t0, t0, t0.Add(time.Hour), "AES_256_CBC", "HMACSHA256", mkey(3)))
	r, err := Open(dir, Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	w := r.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], "DataProtection.Certificate") {
		t.Fatalf("warnings %q, want one naming DataProtection.Certificate", w)
	}
	data, _ := base64.RawURLEncoding.DecodeString(aspnetPayload)
	if _, err := r.Protector("Test trimming").Unprotect(data); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("err %v, want the certificate error", err)
	}
	if k := r.DefaultKey(); k == nil || k.ID.String() != idA {
		t.Fatal("the usable key must be the default key")
	}
}

func TestCertificateFromPEMFilesWorksLikeThePFX(t *testing.T) {
	cert, err := LoadCertificate(aspnetCertPFX(t), "", "password")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath := writePEM(t, dir, cert)
	pem, err := LoadCertificate(certPath, keyPath, "")
	if err != nil {
		t.Fatal(err)
	}
	if pem.Thumbprint() != cert.Thumbprint() {
		t.Fatalf("thumbprints differ")
	}
	r, err := Open("testdata/aspnet-cert-ring", Options{Certificates: []*Certificate{pem}})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := base64.RawURLEncoding.DecodeString(aspnetPayload)
	if pt, err := r.Protector("Test trimming").Unprotect(data); err != nil || string(pt) != "This is a secret." {
		t.Fatalf("%q, %v", pt, err)
	}
}

func TestWrongPFXPasswordIsAnError(t *testing.T) {
	if _, err := LoadCertificate(aspnetCertPFX(t), "", "wrong"); err == nil {
		t.Fatal("no error")
	}
}

func TestApplicationPutsDiscriminatorFirst(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFile(t, filepath.Join(dir, "key-a.xml"), keyXML(idA, t0, t0, t0.Add(time.Hour), "AES_256_CBC", "HMACSHA256", mkey(3)))
	r, err := Open(dir, Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	app := r.Application("/app")
	data, err := app.Protect("purpose", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Protector("/app", "purpose").Unprotect(data); err != nil {
		t.Fatalf("explicit chain: %v", err)
	}
	if _, err := r.Application("").Unprotect("purpose", data); err != ErrInvalid {
		t.Fatalf("no discriminator: %v", err)
	}
	if app.DefaultKeyID() != idA {
		t.Fatalf("default key %q", app.DefaultKeyID())
	}
}
