package atomicfile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Seams for the tests, which record the order of the steps and make them
// fail.
var (
	syncFile = (*os.File).Sync
	rename   = os.Rename
)

// WriteFile replaces path with data, mode perm (exactly: the umask does not
// apply). It writes a temporary file beside path, syncs it, renames it over
// path and syncs the directory, so that once it returns nil the new
// contents survive a crash, and until then path holds its old contents. On
// error the temporary file is removed and path is untouched (unless only
// the directory's sync failed: path then holds the new contents, which a
// crash may undo). The directory must exist.
func WriteFile(path string, data []byte, perm fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if err != nil && !renamed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(perm); err != nil {
		return err
	}
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = syncFile(tmp); err != nil {
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = rename(tmp.Name(), path); err != nil {
		return err
	}
	renamed = true
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := syncFile(d); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
