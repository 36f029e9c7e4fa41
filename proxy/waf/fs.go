package waf

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	coreruleset "github.com/corazawaf/coraza-coreruleset/v4"
)

// rootFS serves "@..." names (the CRS, Coraza's recommended config) from the
// embedded rule set and everything else (the operator's rule files and the
// data files they name) from the OS, so both can be included.
type rootFS struct{}

func crsName(name string) (string, bool) {
	if i := strings.IndexByte(name, '@'); i >= 0 {
		return name[i:], true
	}
	return "", false
}

func (rootFS) Open(name string) (fs.File, error) {
	if n, ok := crsName(name); ok {
		return coreruleset.FS.Open(n)
	}
	return os.Open(name)
}

func (rootFS) ReadFile(name string) ([]byte, error) {
	if n, ok := crsName(name); ok {
		return fs.ReadFile(coreruleset.FS, n)
	}
	return os.ReadFile(name)
}

func (rootFS) Glob(pattern string) ([]string, error) {
	if n, ok := crsName(pattern); ok {
		return fs.Glob(coreruleset.FS, n)
	}
	return filepath.Glob(pattern)
}

var (
	_ fs.ReadFileFS = rootFS{}
	_ fs.GlobFS     = rootFS{}
)
