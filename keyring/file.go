package keyring

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/tether-proxy/tether/internal/atomicfile"
)

// fileFormat names the keyring file format in its first field.
const fileFormat = "tether-keyring"

// fileEnvelope is the keyring file: JSON, holding either wrapped key
// material (Encrypted) or the key set in plaintext (no cluster secret).
type fileEnvelope struct {
	Format    string          `json:"format"`
	Version   int             `json:"version"`
	Encrypted bool            `json:"encrypted"`
	Data      []byte          `json:"data,omitempty"` // WrapKeys output
	Keys      json.RawMessage `json:"keys,omitempty"` // plaintext key set, mode 0600
}

// FileStore keeps keys in one file, replaced atomically on every Save.
// With a kek the material is wrapped (WrapKeys); without one it is stored in
// plaintext, protected only by the file mode 0600.
type FileStore struct {
	path string
	kek  []byte
	mu   sync.Mutex // serializes Save
}

// OpenFile returns a store for path; kek is nil (plaintext) or 32 bytes
// (from DeriveKEK with InfoKeyringFile). The file need not exist yet; its
// directory is created (0700) if missing.
func OpenFile(path string, kek []byte) (*FileStore, error) {
	if kek != nil && len(kek) != KeySize {
		return nil, fmt.Errorf("keyring file %s: key-encryption key is %d bytes, want %d", path, len(kek), KeySize)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("keyring file %s: %w", path, err)
	}
	return &FileStore{path: path, kek: append([]byte(nil), kek...)}, nil
}

// Path is the file's path.
func (f *FileStore) Path() string { return f.path }

// Encrypted reports whether Save wraps the material.
func (f *FileStore) Encrypted() bool { return len(f.kek) > 0 }

// String describes the store without its key-encryption key.
func (f *FileStore) String() string {
	return fmt.Sprintf("keyring.FileStore(%s, encrypted=%t)", f.path, f.Encrypted())
}

// Format keeps every fmt verb from printing the key-encryption key.
func (f *FileStore) Format(s fmt.State, verb rune) { fmt.Fprint(s, f.String()) }

// Load reads the keys. A missing file is an empty key set (nil, nil). A
// plaintext file is accepted even with a kek (the next Save encrypts it).
func (f *FileStore) Load() ([]Key, error) {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("keyring file %s: %w", f.path, err)
	}
	var env fileEnvelope
	if err := json.Unmarshal(b, &env); err != nil || env.Format != fileFormat {
		return nil, fmt.Errorf("keyring file %s: not a tether keyring file", f.path)
	}
	if env.Version != 1 {
		return nil, fmt.Errorf("keyring file %s: version %d is not supported (want 1)", f.path, env.Version)
	}
	if !env.Encrypted {
		keys, err := decodeKeys(env.Keys)
		if err != nil {
			return nil, fmt.Errorf("keyring file %s: %w", f.path, err)
		}
		return keys, nil
	}
	if !f.Encrypted() {
		return nil, fmt.Errorf("keyring file %s is encrypted: give the cluster secret that wrote it (--cluster-secret-file)", f.path)
	}
	keys, err := UnwrapKeys(f.kek, env.Data)
	if errors.Is(err, ErrUnwrap) {
		return nil, fmt.Errorf("keyring file %s cannot be decrypted with the given cluster secret", f.path)
	}
	if err != nil {
		return nil, fmt.Errorf("keyring file %s: %w", f.path, err)
	}
	return keys, nil
}

// Save replaces the file with keys: write a temporary file (mode 0600) in
// the same directory, fsync it, rename it over the file, fsync the
// directory. A crash leaves the old or the new file, never a mix.
func (f *FileStore) Save(keys []Key) error {
	env := fileEnvelope{Format: fileFormat, Version: 1, Encrypted: f.Encrypted()}
	var err error
	if env.Encrypted {
		env.Data, err = WrapKeys(f.kek, keys)
	} else {
		env.Keys, err = encodeKeys(keys)
	}
	var b []byte
	if err == nil {
		b, err = json.MarshalIndent(env, "", "  ")
	}
	if err == nil {
		f.mu.Lock()
		err = atomicfile.WriteFile(f.path, append(b, '\n'), 0o600)
		f.mu.Unlock()
		clear(b)
	}
	clear(env.Keys)
	if err != nil {
		return fmt.Errorf("keyring file %s: %w", f.path, err)
	}
	return nil
}
