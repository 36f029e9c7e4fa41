package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// checkFile says, before anything starts, why the file a flag or argument
// names cannot be read, in an operator's words: which flag, which file
// (relative to which directory), and what the file should be. name is the
// flag ("--config") or the command ("config validate"); what says what
// the file holds.
func checkFile(name, path, what string) error {
	f, err := os.Open(path)
	if err == nil {
		fi, serr := f.Stat()
		f.Close()
		if serr == nil && fi.IsDir() {
			err = &fs.PathError{Op: "open", Path: path, Err: syscall.EISDIR}
		}
	}
	return fileError(name, path, what, err)
}

// readFile reads the file a flag or argument names, with checkFile's
// errors.
func readFile(name, path, what string) ([]byte, error) {
	if err := checkFile(name, path, what); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	return b, fileError(name, path, what, err)
}

func fileError(name, path, what string, err error) error {
	if err == nil {
		return nil
	}
	where := path
	if name != "" {
		where = name + " " + path
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		rel := ""
		if !filepath.IsAbs(path) {
			if wd, err := os.Getwd(); err == nil {
				rel = " in " + wd
			}
		}
		return fmt.Errorf("%s: no such file%s; give the path of %s", where, rel, what)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s: permission denied: run tether as a user that can read it (uid %d), or change the file's owner or mode", where, os.Getuid())
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%s: is a directory; give the path of %s", where, what)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s: cannot read it: %v", where, err)
}
