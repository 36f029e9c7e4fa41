package keyring

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

var testSecret = []byte("correct horse battery staple 0123")

func mustKEK(t *testing.T, secret []byte, info string) []byte {
	t.Helper()
	k, err := DeriveKEK(secret, info)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestDeriveKEK(t *testing.T) {
	a := mustKEK(t, testSecret, InfoKeyringFile)
	if len(a) != KeySize {
		t.Fatalf("kek is %d bytes", len(a))
	}
	cases := []struct {
		desc  string
		other []byte
		equal bool
	}{
		{"same secret and info derive the same key on every node", mustKEK(t, testSecret, InfoKeyringFile), true},
		{"other info derives an independent key", mustKEK(t, testSecret, InfoRaft), false},
		{"other secret derives another key", mustKEK(t, append([]byte("x"), testSecret...), InfoKeyringFile), false},
		{"kek is not the secret itself", testSecret[:KeySize], false},
	}
	for _, c := range cases {
		if bytes.Equal(a, c.other) != c.equal {
			t.Errorf("%s: equal = %t", c.desc, !c.equal)
		}
	}
	if _, err := DeriveKEK([]byte("short"), InfoRaft); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("short secret: %v", err)
	}
	if _, err := DeriveKEK(testSecret, ""); err == nil {
		t.Error("empty info accepted")
	}
}

func TestWrapKeys(t *testing.T) {
	kek := mustKEK(t, testSecret, InfoRaft)
	keys := []Key{mkKey("key-alpha", 0, day), mkKey("key-bravo", day, 2*day)}
	keys[1].Revoked = true
	w, err := WrapKeys(kek, keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if bytes.Contains(w, k.Material) || bytes.Contains(w, []byte(k.ID)) {
			t.Errorf("wrapped blob shows key %s in clear", k.ID)
		}
	}
	got, err := UnwrapKeys(kek, w)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(got, keys, same) {
		t.Errorf("round trip: %v, want %v", got, keys)
	}
	cases := []struct {
		desc string
		kek  []byte
		data []byte
		want error
	}{
		{"wrong kek", mustKEK(t, testSecret, InfoKeyringFile), w, ErrUnwrap},
		{"tampered ciphertext", kek, append(w[:len(w)-1:len(w)-1], w[len(w)-1]^1), ErrUnwrap},
		{"tampered header", kek, append([]byte{'t', 'k', 'w', 2}, w[4:]...), nil},
		{"truncated", kek, w[:10], nil},
		{"kek of wrong size", kek[:16], w, nil},
	}
	for _, c := range cases {
		got, err := UnwrapKeys(c.kek, c.data)
		if err == nil || got != nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: %v, %v; want error %v", c.desc, got, err, c.want)
		}
	}
	bad := mkKey("c", 0, day)
	bad.Material = bad.Material[:5]
	if _, err := WrapKeys(kek, []Key{bad}); err == nil {
		t.Error("WrapKeys accepted an invalid key")
	}
}

func FuzzDecodeKeys(f *testing.F) {
	good, err := encodeKeys([]Key{mkKey("a", 0, day)})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{string(good), "", "{}", `{"version":1,"keys":[{}]}`, `{"version":1,"keys":null}`, "[", `{"version":1,"keys":[{"id":"a","material":"!"}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := decodeKeys(b)
		if err != nil {
			return
		}
		for _, k := range keys {
			if err := k.validate(); err != nil {
				t.Fatalf("decodeKeys returned an invalid key: %v", err)
			}
		}
		if _, err := WrapKeys(bytes.Repeat([]byte{1}, KeySize), keys); err != nil {
			t.Fatalf("decoded keys do not wrap: %v", err)
		}
	})
}
