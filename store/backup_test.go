package store

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
)

// TestRestoreBackupRefusesWhatItCannotOpen: a backup is checked before it
// reaches Raft (whose state machine would stop the node on a failed
// restore): a corrupt file, a file of a cluster with another secret, a
// newer version and a non-leader are refused, and nothing changes.
func TestRestoreBackupRefusesWhatItCannotOpen(t *testing.T) {
	c := newTestCluster(t, 1, knobs{})
	c.bootstrap()
	l := c.leader()
	c.apply(SetDrain{ReqID: "d1", Cluster: "app", Destination: "b1", Deadline: time.Unix(2e9, 0).UTC()})
	var buf bytes.Buffer
	info, err := l.s.SaveBackup(&buf, time.Now())
	if err != nil || info.Drains != 1 || info.Format != BackupFormat {
		t.Fatalf("SaveBackup: %+v %v", info, err)
	}
	good := buf.String()
	other, _ := keyring.NewSecrets([]byte("another cluster's secret, 32 bytes or more"))
	for _, tc := range []struct {
		desc, file string
		kek        *keyring.Secrets
		want       string
	}{
		{"corrupt state", strings.Replace(good, `"state": "`, `"state": "AAAA`, 1), nil, "the file is corrupt"},
		{"another cluster's secret", good, other, "another secret"},
		{"state that is not base64", strings.Replace(good, `"state": "`, `"state": "*`, 1), nil, "the file is corrupt"},
		{"a newer version", strings.Replace(good, `"version": 1`, `"version": 2`, 1), nil, "version 2"},
		{"not a snapshot", `{"ReverseProxy": {}}`, nil, "not a tether snapshot file"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			if tc.kek != nil {
				saved := l.s.secrets
				l.s.secrets = tc.kek
				defer func() { l.s.secrets = saved }()
			}
			_, err := l.s.RestoreBackup(strings.NewReader(tc.file), 5*time.Second)
			if !errors.Is(err, ErrBackup) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrBackup with %q", err, tc.want)
			}
		})
	}
	if len(l.s.Drains()) != 1 {
		t.Fatalf("drains after refused restores: %v", l.s.Drains())
	}
	// The same file restores (here: into the cluster it came from).
	c.apply(ClearDrain{ReqID: "d2", Cluster: "app", Destination: "b1"})
	if _, err := l.s.RestoreBackup(strings.NewReader(good), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := l.s.Drains(); len(d) != 1 || d[0].Destination != "b1" {
		t.Fatalf("drains after restore: %v", d)
	}
}
