package cluster

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// rfc5869 is HKDF-SHA256 written from RFC 5869 §2.2-2.3, independent of the
// crypto/hkdf call under test.
func rfc5869(ikm []byte, info string, n int) []byte {
	extract := hmac.New(sha256.New, make([]byte, sha256.Size)) // no salt: HashLen zeros
	extract.Write(ikm)
	prk := extract.Sum(nil)
	var okm, t []byte
	for i := byte(1); len(okm) < n; i++ {
		h := hmac.New(sha256.New, prk)
		h.Write(t)
		h.Write([]byte(info))
		h.Write([]byte{i})
		t = h.Sum(nil)
		okm = append(okm, t...)
	}
	return okm[:n]
}

func TestGossipKeyKnownAnswer(t *testing.T) {
	seq := make([]byte, 32)
	for i := range seq {
		seq[i] = byte(i)
	}
	cases := []struct {
		desc   string
		secret []byte
		want   string // computed with Python's hmac module, outside Go
	}{
		{"ascii secret", []byte("correct horse battery staple"), "aa8a3fcea6f11de7c0e43f598b710f4b43ffa4e39857bb35c176eaf929c7860a"},
		{"binary secret 00..1f", seq, "8cd292c95c81561c23d3bf4346ff22b8f892bdf37104b45f4b535a9bb732c9f2"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			got, err := GossipKey(c.secret)
			if err != nil {
				t.Fatal(err)
			}
			if hex.EncodeToString(got) != c.want {
				t.Fatalf("GossipKey = %x, want %s", got, c.want)
			}
			if ind := rfc5869(c.secret, "tether gossip key v1", 32); !hmac.Equal(ind, got) {
				t.Fatalf("independent HKDF = %x, GossipKey = %x", ind, got)
			}
		})
	}
}

func TestGossipKeyRequiresSecret(t *testing.T) {
	if _, err := GossipKey(nil); err == nil {
		t.Fatal("GossipKey(nil) succeeded")
	}
}
