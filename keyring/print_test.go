package keyring

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// secretForms are the ways a secret could show up in text.
func secretForms(secret []byte) []string {
	dec := fmt.Sprint(secret[:6])
	return []string{
		string(secret),
		hex.EncodeToString(secret), strings.ToUpper(hex.EncodeToString(secret)),
		base64.StdEncoding.EncodeToString(secret), base64.RawURLEncoding.EncodeToString(secret),
		dec[1 : len(dec)-1], // "12 34 56 ..." as %v prints a []byte
		fmt.Sprintf("%#v", secret[:6])[len("[]byte{"):],
	}
}

func TestMaterialNeverPrinted(t *testing.T) {
	k := mkKey("printme", 0, day)
	kek := mustKEK(t, testSecret, InfoKeyringFile)
	r := newTestRing(t, k)
	fs, err := OpenFile(filepath.Join(t.TempDir(), "k"), kek)
	if err != nil {
		t.Fatal(err)
	}
	m := openManager(t, filepath.Join(t.TempDir(), "m"), kek, Options{Now: func() time.Time { return t0 }})
	mk := m.Ring().Snapshot()[0]

	var outputs []struct{ desc, text string }
	add := func(desc, text string) { outputs = append(outputs, struct{ desc, text string }{desc, text}) }
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%X", "%q", "%d"} {
		add("Key "+verb, fmt.Sprintf(verb, k))
		add("*Key "+verb, fmt.Sprintf(verb, &k))
		add("[]Key "+verb, fmt.Sprintf(verb, []Key{k}))
		add("struct holding a Key "+verb, fmt.Sprintf(verb, struct{ K Key }{k}))
		add("*Ring "+verb, fmt.Sprintf(verb, r))
		add("*FileStore "+verb, fmt.Sprintf(verb, fs))
		add("*Manager "+verb, fmt.Sprintf(verb, m))
	}
	add("Key.String", k.String())
	for _, v := range []any{k, []Key{k}, k.Metadata(t0), r.List(t0), m.List(t0)} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		add(fmt.Sprintf("json %T", v), string(b))
	}
	var logs bytes.Buffer
	for _, h := range []slog.Handler{slog.NewTextHandler(&logs, nil), slog.NewJSONHandler(&logs, nil)} {
		slog.New(h).Info("keys", "key", k, "ptr", &k, "ring", r, "store", fs, "manager", m, "keys", []Key{k})
	}
	add("slog", logs.String())
	bad := k
	bad.Expires = bad.Activates
	add("validation error", bad.validate().Error())
	other := mkKey("printme", 0, 2*day)
	add("conflict error", fmt.Sprint(r.Install(other)))

	for _, o := range outputs {
		for _, secret := range [][]byte{k.Material, mk.Material, kek} {
			for _, f := range secretForms(secret) {
				if strings.Contains(o.text, f) {
					t.Errorf("%s prints secret material (%q): %s", o.desc, f, o.text)
				}
			}
		}
	}
	// The descriptions are still useful.
	if !strings.Contains(fmt.Sprintf("%+v", k), "printme") || !strings.Contains(logs.String(), "printme") {
		t.Errorf("key id missing from output: %+v / %s", k, logs.String())
	}
	if !strings.Contains(fmt.Sprintf("%#v", k), "Material:<redacted>") {
		t.Errorf("%%#v = %#v", k)
	}
}
