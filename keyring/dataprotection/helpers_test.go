package dataprotection

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func writePEM(t *testing.T, dir string, c *Certificate) (certPath, keyPath string) {
	t.Helper()
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	kder, err := x509.MarshalPKCS8PrivateKey(c.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Leaf.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

var (
	testCertOnce sync.Once
	testCert     *Certificate
)

// otherCert is a fresh self-signed RSA certificate (made once per run).
func otherCert(t *testing.T) *Certificate {
	t.Helper()
	testCertOnce.Do(func() {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			panic(err)
		}
		leaf, _ := x509.ParseCertificate(der)
		testCert = &Certificate{Leaf: leaf, Key: key}
	})
	return testCert
}

// keyXML is an unencrypted key file as ASP.NET writes it.
func keyXML(id string, created, activated, expires time.Time, alg, validation string, master []byte) string {
	val := ""
	if validation != "" {
		val = fmt.Sprintf(`<validation algorithm="%s" />`, validation)
	}
	return fmt.Sprintf(`<?xml version="1.0" encoding="utf-8"?>
<key id="%s" version="1">
  <creationDate>%s</creationDate>
  <activationDate>%s</activationDate>
  <expirationDate>%s</expirationDate>
  <descriptor deserializerType="Microsoft.AspNetCore.DataProtection.AuthenticatedEncryption.ConfigurationModel.AuthenticatedEncryptorDescriptorDeserializer, Microsoft.AspNetCore.DataProtection, Version=8.0.0.0, Culture=neutral, PublicKeyToken=adb9793829ddae60">
    <descriptor>
      <encryption algorithm="%s" />
      %s
      <masterKey p4:requiresEncryption="true" xmlns:p4="http://schemas.asp.net/2015/03/dataProtection">
        <!-- Warning: the key below is in an unencrypted form. -->
        <value>%s</value>
      </masterKey>
    </descriptor>
  </descriptor>
</key>`, id, created.Format(time.RFC3339Nano), activated.Format(time.RFC3339Nano), expires.Format(time.RFC3339Nano),
		alg, val, base64.StdEncoding.EncodeToString(master))
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
