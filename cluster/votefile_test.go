package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

func TestCommittedVoteSurvivesARestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "formation-vote")
	edit := func(c *Config) { c.Meta.Expect, c.VoteFile = 1, file }
	n := startNode(t, "solo", edit)
	testutil.Eventually(t, 2*time.Second, "committed", func() bool { return n.Local().FormPhase == phaseCommitted })
	if set, err := readVoteFile(file); err != nil || set != "solo" {
		t.Fatalf("vote file: %q, %v", set, err)
	}
	n.Shutdown()

	n = startNode(t, "solo", edit)
	if l := n.Local(); l.FormSet != "solo" || l.FormPhase != phaseCommitted {
		t.Fatalf("after a restart the vote is %q/%d", l.FormSet, l.FormPhase)
	}
	// once the node has state the vote is over and the file goes
	if err := n.UpdateMeta(func(m *Meta) { m.HasState, m.ClusterID = true, "c1" }); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Second, "vote cleared and file removed", func() bool {
		_, err := os.Stat(file)
		return n.Local().FormSet == "" && os.IsNotExist(err)
	})
}

func TestVoteFileErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		desc, content, want string
	}{
		{"not a vote file", "hello\n", "not a formation vote file"},
		{"a vote without this node", voteFileHeader + "a,b,c\n", "does not fit"},
		{"a vote of another size", voteFileHeader + "me,x\n", "does not fit"},
	}
	for i, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			file := filepath.Join(dir, string(rune('a'+i)))
			if err := os.WriteFile(file, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			m, err := Open(Config{NodeID: "me", BindAddr: "127.0.0.1:0", Secret: testSecret, Meta: Meta{Expect: 3}, VoteFile: file})
			if err == nil {
				m.Shutdown()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Open: %v, want %q", err, c.want)
			}
		})
	}
}
