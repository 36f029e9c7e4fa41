package keyring

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestFileStore(t *testing.T) {
	keys := []Key{mkKey("a", 0, day), mkKey("b", day, 2*day)}
	kek := mustKEK(t, testSecret, InfoKeyringFile)
	otherKEK := mustKEK(t, []byte("another cluster's secret!"), InfoKeyringFile)
	cases := []struct {
		desc      string
		saveKEK   []byte
		loadKEK   []byte
		wantErr   string // "" = round trip
		clearText bool   // material visible in the file
	}{
		{"encrypted round trip", kek, kek, "", false},
		{"plaintext round trip without a cluster secret", nil, nil, "", true},
		{"plaintext file loads once a secret is given", nil, kek, "", true},
		{"wrong cluster secret is refused", kek, otherKEK, "cannot be decrypted with the given cluster secret", false},
		{"encrypted file without a secret is refused", kek, nil, "is encrypted", false},
	}
	for _, c := range cases {
		path := filepath.Join(t.TempDir(), "sub", "keyring.json")
		fs, err := OpenFile(path, c.saveKEK)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := fs.Load(); err != nil || got != nil {
			t.Fatalf("%s: Load of a missing file = %v, %v; want nil, nil", c.desc, got, err)
		}
		if err := fs.Save(keys); err != nil {
			t.Fatalf("%s: Save: %v", c.desc, err)
		}
		b, _ := os.ReadFile(path)
		shown := bytes.Contains(b, []byte(base64.StdEncoding.EncodeToString(keys[0].Material)))
		if shown != c.clearText {
			t.Errorf("%s: material visible in file = %t", c.desc, shown)
		}
		fs2, err := OpenFile(path, c.loadKEK)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fs2.Load()
		if c.wantErr == "" {
			if err != nil || !slices.EqualFunc(got, keys, same) {
				t.Errorf("%s: Load = %v, %v", c.desc, got, err)
			}
			continue
		}
		if err == nil || got != nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: Load = %v, %v; want error naming %s and %q", c.desc, got, err, path, c.wantErr)
		}
	}
}

func TestFileStoreModeAndAtomicSave(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keyring.json")
	fs, err := OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := fs.Save([]Key{mkKey("a", 0, day)}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v, want 0600", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after saves (temp files left?): %v", len(entries), entries)
	}
	// A failed save (the target is a directory) leaves the old file and no temp file.
	bad := filepath.Join(dir, "asdir")
	if err := os.Mkdir(bad, 0o700); err != nil {
		t.Fatal(err)
	}
	fsBad, _ := OpenFile(bad, nil)
	if err := fsBad.Save([]Key{mkKey("a", 0, day)}); err == nil {
		t.Error("Save over a directory succeeded")
	}
	entries, _ = os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("failed save left files: %v", entries)
	}
}

func TestFileStoreRefusesGarbage(t *testing.T) {
	cases := []struct {
		desc, content, want string
	}{
		{"not JSON", "hello", "not a tether keyring file"},
		{"other JSON", `{"a":1}`, "not a tether keyring file"},
		{"future version", `{"format":"tether-keyring","version":9}`, "version 9"},
		{"plaintext file without keys", `{"format":"tether-keyring","version":1}`, "key set"},
		{"invalid key inside", `{"format":"tether-keyring","version":1,"keys":{"version":1,"keys":[{"id":"a","material":"AAAA"}]}}`, "material is 3 bytes"},
	}
	for _, c := range cases {
		path := filepath.Join(t.TempDir(), "k")
		if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
			t.Fatal(err)
		}
		fs, _ := OpenFile(path, nil)
		if _, err := fs.Load(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.desc, err, c.want)
		}
	}
	if _, err := OpenFile(filepath.Join(t.TempDir(), "k"), make([]byte, 7)); err == nil {
		t.Error("OpenFile accepted a 7-byte kek")
	}
}
