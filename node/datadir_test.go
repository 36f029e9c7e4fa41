package node

import (
	"path/filepath"
	"testing"
)

// TestDefaultDataDirIsAbsoluteAndPredictable: without --data-dir a node's
// state goes to an absolute path that does not depend on the working
// directory; state left in ./data/<id> by earlier versions is kept.
func TestDefaultDataDirIsAbsoluteAndPredictable(t *testing.T) {
	legacy, _ := filepath.Abs(filepath.Join("data", "n1"))
	for _, tc := range []struct {
		desc   string
		uid    int
		env    map[string]string
		exists []string
		want   string
	}{
		{"XDG_STATE_HOME wins", 1000, map[string]string{"XDG_STATE_HOME": "/s", "HOME": "/home/u"}, nil, "/s/tether/n1"},
		{"root: /var/lib/tether", 0, map[string]string{"HOME": "/root"}, nil, "/var/lib/tether/n1"},
		{"a user: ~/.local/state/tether", 1000, map[string]string{"HOME": "/home/u"}, nil, "/home/u/.local/state/tether/n1"},
		{"a relative XDG_STATE_HOME is ignored, as XDG says", 1000, map[string]string{"XDG_STATE_HOME": "s", "HOME": "/home/u"}, nil, "/home/u/.local/state/tether/n1"},
		{"no home: ./data/<id>, made absolute", 1000, nil, nil, legacy},
		{"state from an earlier version in ./data/<id> is kept", 1000, map[string]string{"HOME": "/home/u"}, []string{legacy}, legacy},
		{"the new default wins once it exists", 1000, map[string]string{"HOME": "/home/u"}, []string{legacy, "/home/u/.local/state/tether/n1"}, "/home/u/.local/state/tether/n1"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			got := defaultDataDir("n1", tc.uid, func(k string) string { return tc.env[k] },
				func(p string) bool {
					for _, e := range tc.exists {
						if e == p {
							return true
						}
					}
					return false
				})
			if got != tc.want || !filepath.IsAbs(got) {
				t.Fatalf("got %q, want %q (absolute)", got, tc.want)
			}
		})
	}
}
