package affinity

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// fakeKeyring is a small real AES-256-GCM keyring: the value is
// base64url(keyID || nonce || ciphertext), with keyID and purpose bound in
// as authenticated data, like package keyring's.
type fakeKeyring struct {
	active byte
	keys   map[byte]cipher.AEAD
}

var _ Keyring = (*fakeKeyring)(nil)

func newFakeKeyring(tb testing.TB) *fakeKeyring {
	tb.Helper()
	k := &fakeKeyring{keys: map[byte]cipher.AEAD{}}
	k.addKey(tb, 1)
	return k
}

// addKey installs a fresh random key with id and makes it active.
func (k *fakeKeyring) addKey(tb testing.TB, id byte) {
	tb.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		tb.Fatal(err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		tb.Fatal(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		tb.Fatal(err)
	}
	k.keys[id] = aead
	k.active = id
}

func (k *fakeKeyring) Seal(purpose, plaintext []byte) (string, error) {
	aead := k.keys[k.active]
	out := make([]byte, 1+aead.NonceSize(), 1+aead.NonceSize()+len(plaintext)+aead.Overhead())
	out[0] = k.active
	if _, err := rand.Read(out[1:]); err != nil {
		return "", err
	}
	ad := append([]byte{k.active}, purpose...)
	out = aead.Seal(out, out[1:1+aead.NonceSize()], plaintext, ad)
	return base64.RawURLEncoding.EncodeToString(out), nil
}

var errOpen = errors.New("fake keyring: cannot open")

func (k *fakeKeyring) Open(purpose []byte, value string) ([]byte, error) {
	if len(value) > 4096 {
		return nil, errOpen
	}
	b, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(b) < 1 {
		return nil, errOpen
	}
	aead, ok := k.keys[b[0]]
	if !ok || len(b) < 1+aead.NonceSize()+aead.Overhead() {
		return nil, errOpen
	}
	ns := aead.NonceSize()
	ad := make([]byte, 0, 1+len(purpose))
	// Decrypt in place: the plaintext reuses the decoded buffer.
	pt, err := aead.Open(b[1+ns:1+ns], b[1:1+ns], b[1+ns:], append(append(ad, b[0]), purpose...))
	if err != nil {
		return nil, errOpen
	}
	return pt, nil
}

// funcKeyring is a keyring of function fields, for failure injection.
type funcKeyring struct {
	seal func(purpose, plaintext []byte) (string, error)
	open func(purpose []byte, value string) ([]byte, error)
}

func (k funcKeyring) Seal(p, pt []byte) (string, error)       { return k.seal(p, pt) }
func (k funcKeyring) Open(p []byte, v string) ([]byte, error) { return k.open(p, v) }

// dest builds a destination; meta is optional key/value pairs.
func dest(id string, meta ...string) *upstream.Destination {
	var md map[string]string
	if len(meta) > 0 {
		md = map[string]string{}
		for i := 0; i+1 < len(meta); i += 2 {
			md[meta[i]] = meta[i+1]
		}
	}
	u, _ := url.Parse("http://127.0.0.1:1/")
	return upstream.NewDestination(id, u, nil, "", md)
}

func cluster(id string, ds ...*upstream.Destination) *upstream.Cluster {
	return upstream.NewCluster(id, ds)
}

func enabled(pol, name string) config.SessionAffinity {
	return config.SessionAffinity{Enabled: true, Policy: pol, AffinityKeyName: name}
}

func mustNew(tb testing.TB, clusterID string, cfg config.SessionAffinity, c *upstream.Cluster, kr Keyring) *Provider {
	tb.Helper()
	p, err := New(clusterID, cfg, c, Options{Keyring: kr})
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	if p == nil {
		tb.Fatal("New returned nil for an enabled config")
	}
	return p
}

// request builds a request with the given header lines ("Name: value").
func request(lines ...string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "http://example.test/", nil)
	for _, l := range lines {
		for i := 0; i < len(l); i++ {
			if l[i] == ':' {
				r.Header.Add(l[:i], trimOWS(l[i+1:]))
				break
			}
		}
	}
	return r
}

func ids(ds []*upstream.Destination) []string {
	out := make([]string, 0, len(ds))
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
