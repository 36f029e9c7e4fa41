package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// entries lists dir's names, sorted.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		old  string // "" = no file before
		data string
		perm fs.FileMode
	}{
		{"new file 0600", "", "secret\n", 0o600},
		{"replaces a longer file", "a much longer earlier content\n", "short\n", 0o600},
		{"mode beyond the umask", "", "shared\n", 0o664},
		{"narrows the mode of an existing file", "old", "new", 0o400},
		{"empty", "old", "", 0o600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f.json")
			if tc.old != "" {
				if err := os.WriteFile(path, []byte(tc.old), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := WriteFile(path, []byte(tc.data), tc.perm); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.data {
				t.Errorf("contents %q, want %q", b, tc.data)
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != tc.perm {
				t.Errorf("mode %v, want %v", st.Mode().Perm(), tc.perm)
			}
			if got := entries(t, dir); !slices.Equal(got, []string{"f.json"}) {
				t.Errorf("directory holds %v, want only f.json (no temporary file left)", got)
			}
		})
	}
}

// The file is synced before the rename (the new name never points at data
// still in the page cache only) and the directory after it (the rename
// itself is durable when WriteFile returns).
func TestWriteFileSyncsFileThenRenamesThenSyncsDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vote")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	var steps []string
	onDisk := func() string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	origSync, origRename := syncFile, rename
	t.Cleanup(func() { syncFile, rename = origSync, origRename })
	syncFile = func(f *os.File) error {
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		kind := "sync file"
		if st.IsDir() {
			kind = "sync dir"
		}
		steps = append(steps, kind+" (path holds "+onDisk()+")")
		return origSync(f)
	}
	rename = func(from, to string) error {
		steps = append(steps, "rename")
		return origRename(from, to)
	}
	if err := WriteFile(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := []string{"sync file (path holds old)", "rename", "sync dir (path holds new)"}
	if !slices.Equal(steps, want) {
		t.Errorf("steps %q, want %q", steps, want)
	}
}

// A failure before the rename leaves the old file whole and no temporary
// file; each step's error is returned.
func TestWriteFileFailureKeepsOldContentsAndRemovesTemp(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name     string
		syncFile func(*os.File) error
		rename   func(string, string) error
	}{
		{"file sync fails", func(*os.File) error { return boom }, os.Rename},
		{"rename fails", (*os.File).Sync, func(string, string) error { return boom }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "keyring.json")
			if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			origSync, origRename := syncFile, rename
			t.Cleanup(func() { syncFile, rename = origSync, origRename })
			syncFile, rename = tc.syncFile, tc.rename
			err := WriteFile(path, []byte("new"), 0o600)
			if !errors.Is(err, boom) {
				t.Fatalf("err %v, want %v", err, boom)
			}
			if b, _ := os.ReadFile(path); string(b) != "old" {
				t.Errorf("path holds %q after a failed write, want the old contents", b)
			}
			if got := entries(t, dir); !slices.Equal(got, []string{"keyring.json"}) {
				t.Errorf("directory holds %v, want only keyring.json", got)
			}
		})
	}
}

// When the directory's sync fails the rename happened: the error says so
// and the new contents are in place (a crash may undo them).
func TestWriteFileDirectorySyncFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "peers")
	boom := errors.New("boom")
	origSync := syncFile
	t.Cleanup(func() { syncFile = origSync })
	syncFile = func(f *os.File) error {
		if st, err := f.Stat(); err == nil && st.IsDir() {
			return boom
		}
		return origSync(f)
	}
	err := WriteFile(path, []byte("new"), 0o600)
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want %v", err, boom)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Errorf("path holds %q, want the new contents", b)
	}
	if got := entries(t, dir); !slices.Equal(got, []string{"peers"}) {
		t.Errorf("directory holds %v, want only peers", got)
	}
}

// Errors a user meets for real: a missing directory, a directory in the
// way of the file.
func TestWriteFileRealErrors(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFile(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing directory: err %v, want ErrNotExist", err)
	}
	busy := filepath.Join(dir, "busy")
	if err := os.Mkdir(busy, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(busy, "inside"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(busy, []byte("x"), 0o600); err == nil {
		t.Error("writing over a non-empty directory succeeded")
	}
	if got := entries(t, dir); !slices.Equal(got, []string{"busy"}) {
		t.Errorf("directory holds %v, want only busy (the temporary file removed)", got)
	}
}
