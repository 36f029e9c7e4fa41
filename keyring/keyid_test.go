package keyring

import (
	"strings"
	"testing"
	"time"
)

func TestKeyIDOfNamesTheKeyOfWellFormedValuesOnly(t *testing.T) {
	k, err := GenerateKey(time.Now().Add(-time.Minute), 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRing(Options{})
	if err := r.Install(k); err != nil {
		t.Fatal(err)
	}
	v, err := r.Seal([]byte("p"), []byte("d1"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		desc   string
		value  string
		wantID string
	}{
		{desc: "a sealed value names its key", value: v, wantID: k.ID},
		{desc: "empty", value: ""},
		{desc: "not base64url", value: strings.Repeat("!", 60)},
		{desc: "too short", value: v[:20]},
		{desc: "too long", value: strings.Repeat("A", MaxValueLen+4)},
		{desc: "wrong version", value: b64.EncodeToString(append([]byte{9, 1, 'a'}, make([]byte, nonceSize+tagSize)...))},
		{desc: "an id no key can have", value: b64.EncodeToString(append([]byte{wireVersion, 1, '/'}, make([]byte, nonceSize+tagSize)...))},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			id, ok := KeyIDOf(c.value)
			if id != c.wantID || ok != (c.wantID != "") {
				t.Fatalf("KeyIDOf = %q, %v; want %q", id, ok, c.wantID)
			}
		})
	}
}
