package testutil

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestOnePollForEveryPackage: tests wait for a condition with Eventually,
// not with a package's own eventually or waitFor wrapper around it (they
// grew four signatures and as many default timeouts).
func TestOnePollForEveryPackage(t *testing.T) {
	wrapper := regexp.MustCompile(`(?m)^func (eventually|waitFor|waitUntil)\(`)
	var found []string
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range wrapper.FindAllStringSubmatch(string(b), -1) {
			found = append(found, path+": func "+m[1])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		t.Fatalf("local poll wrappers (use testutil.Eventually):\n%s", strings.Join(found, "\n"))
	}
}
