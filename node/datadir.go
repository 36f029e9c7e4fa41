package node

import (
	"os"
	"path/filepath"
)

// DefaultDataDir is the data directory of a node started without
// --data-dir: an absolute path that does not depend on the working
// directory, so a node restarted from elsewhere finds its state.
//
//   - $XDG_STATE_HOME/tether/<node-id> when XDG_STATE_HOME is set;
//   - /var/lib/tether/<node-id> for root;
//   - ~/.local/state/tether/<node-id> otherwise (XDG's default state dir).
//
// A node that kept its state in ./data/<node-id> (the default of earlier
// versions) keeps using it while the new default does not exist yet.
func DefaultDataDir(nodeID string) string {
	return defaultDataDir(nodeID, os.Getuid(), os.Getenv, dirExists)
}

func defaultDataDir(nodeID string, uid int, getenv func(string) string, exists func(string) bool) string {
	var dir string
	switch home := getenv("HOME"); {
	case getenv("XDG_STATE_HOME") != "" && filepath.IsAbs(getenv("XDG_STATE_HOME")):
		dir = filepath.Join(getenv("XDG_STATE_HOME"), "tether", nodeID)
	case uid == 0:
		dir = filepath.Join("/var/lib/tether", nodeID)
	case home != "" && filepath.IsAbs(home):
		dir = filepath.Join(home, ".local", "state", "tether", nodeID)
	}
	legacy, err := filepath.Abs(filepath.Join("data", nodeID))
	if err != nil {
		legacy = filepath.Join("data", nodeID)
	}
	if dir == "" || (!exists(dir) && exists(legacy)) {
		return legacy
	}
	return dir
}

func dirExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
