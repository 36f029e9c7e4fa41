package secrets

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tether-proxy/tether/keyring"
)

// TestSecretsSurviveARestartWithTheOldFile: a node keeps the secrets it
// holds in its data dir (0600) once they differ from its secret file; it
// restarts on them with the old file, never takes a removed secret from
// its file for the cluster's, takes a new file's secret as accepted, and
// drops the data dir's copy once its file holds the secret in use alone.
func TestSecretsSurviveARestartWithTheOldFile(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	open := func(fileSecret []byte) (*Keeper, error) {
		return Open(dir, "secret", fileSecret, slog.New(slog.NewTextHandler(&logs, nil)))
	}
	oldS, newS := []byte("old-cluster-secret-0123456789"), []byte("new-cluster-secret-0123456789")
	oldID, newID := keyring.SecretID(oldS), keyring.SecretID(newS)
	path := filepath.Join(dir, File)

	n, err := open(oldS)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Save(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a node that never rotated keeps its secret in the data dir: %v", err)
	}
	// The rotation: install, use, remove.
	w, _, _ := n.Secrets().WrapSecret(newS)
	_ = n.Secrets().Sync([]keyring.SecretRecord{{ID: newID, State: keyring.SecretPrimary, Wrapped: w}}, []keyring.RemovedSecret{{ID: oldID, Index: 5}})
	if err := n.Save(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("after the rotation: %v, %v", err, fi)
	}

	// Restarted with the old file: the new secret is primary, the old one
	// retired, and the log says the file holds a removed secret.
	n, err = open(oldS)
	if err != nil {
		t.Fatal(err)
	}
	if n.Secrets().PrimaryID() != newID || n.Secrets().State(oldID) != keyring.SecretRetired || len(n.Secrets().Accepted()) != 1 {
		t.Fatalf("restarted with the old file: %+v", n.Secrets().List())
	}
	if !strings.Contains(logs.String(), "holds a secret the cluster removed") {
		t.Fatalf("log: %s", logs.String())
	}
	// A third secret in the file: accepted beside the kept ones.
	third := []byte("third-cluster-secret-0123456789")
	n, err = open(third)
	if err != nil {
		t.Fatal(err)
	}
	if n.Secrets().PrimaryID() != newID || n.Secrets().State(keyring.SecretID(third)) != keyring.SecretInstalled {
		t.Fatalf("restarted with a new file: %+v", n.Secrets().List())
	}
	// The file holds the secret in use and the removed one is forgotten:
	// the data dir's copy goes.
	n, err = open(newS)
	if err != nil {
		t.Fatal(err)
	}
	n.Secrets().Purge(5)
	if err := n.Save(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the file holds the secret in use alone, yet the data dir keeps a copy: %v", err)
	}
	// A file that is not ours is refused, naming it.
	os.WriteFile(path, []byte(`{"version": 7}`), 0o600)
	if _, err := open(newS); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("a foreign secrets file: %v", err)
	}
}

// TestLocalSecretIsWrittenWholeWithMode0600: a node without
// --cluster-secret-file makes a secret of its own and writes it through
// atomicfile (a temporary file renamed over the name, mode 0600 whatever
// the umask), leaving no temporary file; a restart reads the same secret.
func TestLocalSecretIsWrittenWholeWithMode0600(t *testing.T) {
	dir := t.TempDir()
	s, err := Load("", dir, slog.New(slog.DiscardHandler))
	if err != nil || len(s) != 64 {
		t.Fatalf("local secret: %q, %v", s, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "local-secret"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("local-secret: %v, %v", fi, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("the data dir holds %d entries, want the secret alone (no temporary file)", len(entries))
	}
	again, err := Load("", dir, slog.New(slog.DiscardHandler))
	if err != nil || !bytes.Equal(again, s) {
		t.Fatalf("read again: %q, %v; want %q", again, err, s)
	}
}
