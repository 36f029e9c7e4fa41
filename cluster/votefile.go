package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tether-proxy/tether/internal/atomicfile"
)

// A committed formation vote must survive a restart: a node that forgot it
// could commit to another set after others bootstrapped with it. When
// Config.VoteFile is set the vote is written there (and synced) before it
// is gossiped, and read back at Open.

const voteFileHeader = "tether formation vote v1\n"

func writeVoteFile(path, set string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, []byte(voteFileHeader+set+"\n"), 0o600)
}

// readVoteFile returns the committed set in path, "" when there is none.
func readVoteFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	s, ok := strings.CutPrefix(string(b), voteFileHeader)
	set, ok2 := strings.CutSuffix(s, "\n")
	if !ok || !ok2 || set == "" || strings.ContainsAny(set, "\n") {
		return "", fmt.Errorf("%s is not a formation vote file", path)
	}
	return set, nil
}

// loadVote puts the committed vote of cfg.VoteFile into cfg.Meta when the
// node has no state yet.
func loadVote(cfg *Config) error {
	if cfg.VoteFile == "" {
		return nil
	}
	set, err := readVoteFile(cfg.VoteFile)
	if err != nil || set == "" {
		return err
	}
	if cfg.Meta.HasState || cfg.Meta.ClusterID != "" {
		return nil // formed: the vote no longer matters
	}
	ids := strings.Split(set, ",")
	in := false
	for _, id := range ids {
		in = in || id == cfg.NodeID
	}
	if !in || len(ids) != cfg.Meta.Expect {
		return fmt.Errorf("%s holds a vote for %s, which does not fit node %q with bootstrap-expect %d: remove it if the node's data was reset",
			cfg.VoteFile, set, cfg.NodeID, cfg.Meta.Expect)
	}
	cfg.Meta.FormSet, cfg.Meta.FormPhase = set, phaseCommitted
	return nil
}
