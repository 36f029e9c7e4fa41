package keyringtest

import (
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
)

// Secrets holds the given cluster secrets, the first one primary, the
// rest installed.
func Secrets(t testing.TB, secrets ...[]byte) *keyring.Secrets {
	t.Helper()
	var held []keyring.HeldSecret
	for i, s := range secrets {
		st := keyring.SecretInstalled
		if i == 0 {
			st = keyring.SecretPrimary
		}
		held = append(held, keyring.HeldSecret{ID: keyring.SecretID(s), State: st, Secret: s})
	}
	sec, err := keyring.RestoreSecrets(held)
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

// SealedUnderNewKey seals a Cookie-policy value of cluster app (cookie
// aff) under a new key, active since a minute ago, and returns the key and
// the value.
func SealedUnderNewKey(t testing.TB) (keyring.Key, string) {
	t.Helper()
	k, err := keyring.GenerateKey(time.Now().Add(-time.Minute), 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issuer := keyring.NewRing(keyring.Options{})
	if err := issuer.Install(k); err != nil {
		t.Fatal(err)
	}
	value, err := issuer.Seal(keyring.Purpose("Cookie", "app", "aff"), []byte("d1"))
	if err != nil {
		t.Fatal(err)
	}
	return k, value
}
