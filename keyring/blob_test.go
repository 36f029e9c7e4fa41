package keyring

import (
	"bytes"
	"errors"
	"testing"
)

func TestWrapBlobOpensOnlyWithItsKEKAndPurpose(t *testing.T) {
	kek, _ := DeriveKEK([]byte("a-cluster-secret-of-enough-bytes"), InfoRaft)
	other, _ := DeriveKEK([]byte("another-cluster-secret-of-bytes!"), InfoRaft)
	w, err := WrapBlob(kek, "acme account", []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(w, []byte("secret")) {
		t.Fatal("the wrapped blob holds the plaintext")
	}
	if p, err := UnwrapBlob(kek, "acme account", w); err != nil || string(p) != "secret" {
		t.Fatalf("UnwrapBlob: %q, %v", p, err)
	}
	tampered := bytes.Clone(w)
	tampered[len(tampered)-1] ^= 1
	for _, tc := range []struct {
		desc    string
		kek     []byte
		purpose string
		data    []byte
	}{
		{"another cluster's KEK", other, "acme account", w},
		{"another purpose", kek, "acme cert", w},
		{"altered data", kek, "acme account", tampered},
	} {
		if _, err := UnwrapBlob(tc.kek, tc.purpose, tc.data); !errors.Is(err, ErrUnwrap) {
			t.Errorf("%s: %v, want ErrUnwrap", tc.desc, err)
		}
	}
	if _, err := UnwrapBlob(kek, "acme account", []byte("tkw\x01short")); err == nil || errors.Is(err, ErrUnwrap) {
		t.Errorf("a blob of another format: %v, want a format error", err)
	}
}
