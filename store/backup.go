package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tether-proxy/tether/keyring"
)

// A backup is one file holding the replicated state (keyring, drains,
// ACME state) in the Raft snapshot encoding: key material wrapped with the
// key-encryption key derived from the cluster secret, as in Raft snapshots
// on disk. The file also carries a checksum of that state and what it
// holds, so a restore refuses a corrupt or foreign file before it touches
// the cluster. It carries no Raft configuration, cluster id or request
// ids: restoring it into another cluster (other node ids and addresses)
// keeps that cluster's membership and identity.

// BackupFormat names the backup file format; BackupVersion is its version.
const (
	BackupFormat  = "tether-snapshot"
	BackupVersion = 1
)

// ErrBackup is the error of a file that is not a backup this cluster can
// restore (corrupt, foreign, or of a newer version).
var ErrBackup = errors.New("store: not a backup this cluster can restore")

// BackupInfo describes a backup file.
type BackupInfo struct {
	Format    string    `json:"format"`
	Version   int       `json:"version"`
	ClusterID string    `json:"cluster_id"` // the cluster it was saved from
	Node      string    `json:"node"`       // the node that saved it
	Index     uint64    `json:"index"`      // the Raft index it reflects there
	Saved     time.Time `json:"saved"`
	Keys      int       `json:"keys"`
	Drains    int       `json:"drains"`
}

type backupFile struct {
	BackupInfo
	SHA256 string `json:"sha256"` // of State
	State  []byte `json:"state"`
}

// SaveBackup writes the replicated state as this node has applied it to w.
func (s *Store) SaveBackup(w io.Writer, now time.Time) (BackupInfo, error) {
	fs, err := s.fsm.Snapshot()
	if err != nil {
		return BackupInfo{}, err
	}
	snap := fs.(*fsmSnapshot)
	defer snap.Release()
	snap.body.Requests = nil // request ids are this cluster's history, not state
	// The cluster's secrets are its own, as its membership: a backup
	// carries neither (and nothing wrapped under an old secret).
	snap.body.Secrets, snap.body.SecretsRemoved = nil, nil
	state, err := snap.encode()
	if err != nil {
		return BackupInfo{}, fmt.Errorf("store: backup: %w", err)
	}
	sum := sha256.Sum256(state)
	f := backupFile{
		BackupInfo: BackupInfo{Format: BackupFormat, Version: BackupVersion, ClusterID: snap.body.ClusterID, Node: s.id,
			Index: s.AppliedIndex(), Saved: now.UTC(), Keys: len(snap.keys), Drains: len(snap.body.Drains)},
		SHA256: hex.EncodeToString(sum[:]), State: state,
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(f); err != nil {
		return BackupInfo{}, fmt.Errorf("store: backup: %w", err)
	}
	return f.BackupInfo, nil
}

// checkBackup reads a backup and checks it opens with this cluster's
// secret; it returns what it holds and the state to restore.
func (s *Store) checkBackup(r io.Reader) (BackupInfo, *fsmSnapshot, error) {
	b, err := io.ReadAll(io.LimitReader(r, 2*maxSnapshotSize+1))
	if err != nil {
		return BackupInfo{}, nil, fmt.Errorf("store: reading backup: %w", err)
	}
	if len(b) > 2*maxSnapshotSize {
		return BackupInfo{}, nil, fmt.Errorf("%w: larger than %d bytes", ErrBackup, 2*maxSnapshotSize)
	}
	var head struct {
		Format string `json:"format"`
	}
	if err := json.Unmarshal(b, &head); err != nil || head.Format != BackupFormat {
		return BackupInfo{}, nil, fmt.Errorf("%w: not a tether snapshot file (want JSON with format %q, as tether snapshot save writes)", ErrBackup, BackupFormat)
	}
	var f backupFile
	if err := json.Unmarshal(b, &f); err != nil {
		return BackupInfo{}, nil, fmt.Errorf("%w: the file is corrupt: %v", ErrBackup, err)
	}
	if f.Version != BackupVersion {
		return f.BackupInfo, nil, fmt.Errorf("%w: version %d, this tether reads version %d", ErrBackup, f.Version, BackupVersion)
	}
	if sum := sha256.Sum256(f.State); hex.EncodeToString(sum[:]) != f.SHA256 {
		return f.BackupInfo, nil, fmt.Errorf("%w: the state does not match its checksum: the file is corrupt", ErrBackup)
	}
	// Only the secrets the cluster accepts: one it removed opens nothing.
	snap, err := decodeSnapshotWith(func(*snapshotBody) [][]byte { return s.secrets.AcceptedKEKs(keyring.InfoRaft) }, f.State)
	if errors.Is(err, keyring.ErrUnwrap) {
		return f.BackupInfo, nil, fmt.Errorf("%w: its keys do not open with this cluster's secret: it was saved by a cluster with another secret (restore needs that cluster's --cluster-secret-file)", ErrBackup)
	}
	if err != nil {
		return f.BackupInfo, nil, fmt.Errorf("%w: %v", ErrBackup, err)
	}
	return f.BackupInfo, snap, nil
}

// RestoreBackup replaces the replicated state with a backup's, through
// Raft: the leader takes it and followers install it as a snapshot. The
// file is checked first (checkBackup): raft stops a node whose state
// machine fails to restore. The cluster keeps its own id and membership.
// Only the leader restores.
func (s *Store) RestoreBackup(r io.Reader, timeout time.Duration) (BackupInfo, error) {
	info, snap, err := s.checkBackup(r)
	if err != nil {
		return info, err
	}
	defer snap.Release()
	if !s.IsLeader() {
		return info, ErrNotLeader
	}
	snap.body.ClusterID = s.fsm.ClusterID()
	snap.body.Requests = nil
	s.fsm.mu.RLock()
	snap.body.Secrets, snap.body.SecretsRemoved = slices.Clone(s.fsm.secretRecs), slices.Clone(s.fsm.secretsRemoved)
	s.fsm.mu.RUnlock()
	snap.kek = s.secrets.KEK(keyring.InfoRaft)
	state, err := snap.encode()
	if err != nil {
		return info, fmt.Errorf("store: restore: %w", err)
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: int64(len(state))}
	if err := s.raft.Restore(meta, bytes.NewReader(slices.Clip(state)), timeout); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return info, ErrNotLeader
		}
		return info, fmt.Errorf("store: restore: %w", err)
	}
	s.logger.Warn("replicated state restored from a backup", "from_cluster", info.ClusterID, "from_node", info.Node,
		"saved", info.Saved, "keys", info.Keys, "drains", info.Drains)
	return info, nil
}
