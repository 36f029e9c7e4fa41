package store

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/store/command"
)

// A backup is one file holding the replicated state (keyring, drains,
// ACME state) in the Raft snapshot encoding: key material and secret ACME
// values wrapped with the key-encryption key derived from the cluster
// secret, as in Raft snapshots on disk. It carries no Raft configuration,
// cluster id or request ids: restoring it into another cluster (other node
// ids and addresses) keeps that cluster's membership and identity.
//
// The file is JSON: {"format", "version", "body", "sha256", "mac"}. body
// is the JSON of backupBody (what was saved, from where, and the state);
// sha256 is its checksum (it tells a corrupt file from an edited one); mac
// is HMAC-SHA256 of body under a key derived from the cluster secret
// (keyring.InfoBackup). A restore checks the mac with every secret the
// cluster accepts before it decodes anything else: whoever can write to
// the backup store but lacks the secret cannot change what a restore
// applies.

// BackupFormat names the backup file format; BackupVersion is its version.
const (
	BackupFormat  = "tether-snapshot"
	BackupVersion = 2
)

// maxBackupClockAhead is how far ahead of the cluster's time a backup's
// committed clock may be: further, and keys would neither activate nor
// rotate until the cluster's time caught up with it.
const maxBackupClockAhead = time.Minute

// ErrBackup is the error of a file that is not a backup this cluster can
// restore (corrupt, edited, foreign, or of a newer version).
var ErrBackup = errors.New("store: not a backup this cluster can restore")

// BackupInfo describes a backup: where it was saved and, for a restore,
// what its decoded state holds (never what the file claims).
type BackupInfo struct {
	Format    string    `json:"format"`
	Version   int       `json:"version"`
	ClusterID string    `json:"cluster_id"` // the cluster it was saved from
	Node      string    `json:"node"`       // the node that saved it
	Index     uint64    `json:"index"`      // the Raft index it reflects there
	Saved     time.Time `json:"saved"`
	Keys      int       `json:"keys"`
	Drains    int       `json:"drains"`
	Acme      int       `json:"acme_entries"`
	// Commands is the command set applied into the state.
	Commands CommandSet `json:"commands"`
}

// backupFile is the file; backupBody is what body holds.
type backupFile struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Body    []byte `json:"body"`
	SHA256  string `json:"sha256"` // of Body
	MAC     string `json:"mac"`    // HMAC-SHA256 of Body, key keyring.InfoBackup
}

type backupBody struct {
	BackupInfo
	State []byte `json:"state"` // the snapshot encoding
}

// SaveBackup writes the replicated state as this node has applied it to w,
// authenticated with the cluster secret in use.
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
	info := BackupInfo{Format: BackupFormat, Version: BackupVersion, ClusterID: snap.body.ClusterID, Node: s.id,
		Index: s.AppliedIndex(), Saved: now.UTC(), Keys: len(snap.keys), Drains: len(snap.body.Drains), Acme: len(snap.acme),
		Commands: snap.body.Commands}
	body, err := json.Marshal(backupBody{info, state})
	if err != nil {
		return BackupInfo{}, fmt.Errorf("store: backup: %w", err)
	}
	sum := sha256.Sum256(body)
	f := backupFile{Format: BackupFormat, Version: BackupVersion, Body: body, SHA256: hex.EncodeToString(sum[:]),
		MAC: hex.EncodeToString(backupMAC(s.secrets.KEK(keyring.InfoBackup), body))}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(f); err != nil {
		return BackupInfo{}, fmt.Errorf("store: backup: %w", err)
	}
	return info, nil
}

func backupMAC(key, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return m.Sum(nil)
}

// openBackup reads a backup, authenticates it with every secret the
// cluster accepts (keys) and only then decodes it, strictly. It returns
// the body and the decoded state, not yet checked against this cluster
// (checkBackup).
func openBackup(r io.Reader, macKeys, keks [][]byte) (backupBody, *fsmSnapshot, error) {
	b, err := io.ReadAll(io.LimitReader(r, 2*maxSnapshotSize+1))
	if err != nil {
		return backupBody{}, nil, fmt.Errorf("store: reading backup: %w", err)
	}
	if len(b) > 2*maxSnapshotSize {
		return backupBody{}, nil, fmt.Errorf("%w: larger than %d bytes", ErrBackup, 2*maxSnapshotSize)
	}
	var head struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(b, &head); err != nil || head.Format != BackupFormat {
		return backupBody{}, nil, fmt.Errorf("%w: not a tether snapshot file (want JSON with format %q, as tether snapshot save writes)", ErrBackup, BackupFormat)
	}
	switch {
	case head.Version == 1:
		return backupBody{}, nil, fmt.Errorf("%w: version 1, which is not authenticated: this tether restores only authenticated backups (version %d); save a new one with tether snapshot save", ErrBackup, BackupVersion)
	case head.Version != BackupVersion:
		return backupBody{}, nil, fmt.Errorf("%w: version %d, this tether reads version %d", ErrBackup, head.Version, BackupVersion)
	}
	var f backupFile
	if err := decodeStrict(b, &f); err != nil {
		return backupBody{}, nil, fmt.Errorf("%w: the file is corrupt: %v", ErrBackup, err)
	}
	if sum := sha256.Sum256(f.Body); hex.EncodeToString(sum[:]) != f.SHA256 {
		return backupBody{}, nil, fmt.Errorf("%w: the body does not match its checksum: the file is corrupt", ErrBackup)
	}
	mac, err := hex.DecodeString(f.MAC)
	if err != nil || !slices.ContainsFunc(macKeys, func(k []byte) bool { return hmac.Equal(mac, backupMAC(k, f.Body)) }) {
		return backupBody{}, nil, fmt.Errorf("%w: it is not authenticated by this cluster's secret: the file was edited after it was saved, or saved by a cluster with another secret (restore needs that cluster's --cluster-secret-file)", ErrBackup)
	}
	var body backupBody
	if err := decodeStrict(f.Body, &body); err != nil {
		var unknown *unknownFieldError
		if errors.As(err, &unknown) {
			return backupBody{}, nil, fmt.Errorf("%w: it was saved by a newer tether: %v", ErrBackup, err)
		}
		return backupBody{}, nil, fmt.Errorf("%w: the file is corrupt: %v", ErrBackup, err)
	}
	if body.Format != BackupFormat || body.Version != BackupVersion {
		return backupBody{}, nil, fmt.Errorf("%w: its body is format %q version %d, its file format %q version %d", ErrBackup, body.Format, body.Version, f.Format, f.Version)
	}
	snap, err := decodeSnapshotWith(func(*snapshotBody) [][]byte { return keks }, body.State)
	switch {
	case errors.Is(err, keyring.ErrUnwrap):
		return backupBody{}, nil, fmt.Errorf("%w: its keys do not open with this cluster's secret: it was saved by a cluster with another secret (restore needs that cluster's --cluster-secret-file)", ErrBackup)
	case errors.Is(err, ErrNewerSnapshot):
		return backupBody{}, nil, fmt.Errorf("%w: it was saved by a newer tether: %v", ErrBackup, err)
	case err != nil:
		return backupBody{}, nil, fmt.Errorf("%w: %v", ErrBackup, err)
	}
	return body, snap, nil
}

// checkBackup reads and authenticates a backup and checks that this
// cluster can take its state: every command in it is one this node
// applies, ACME accounts and certificates are secret (wrapped), and its
// committed clock is not far ahead of now, the cluster's time. The info
// it returns is what the state holds.
func (s *Store) checkBackup(r io.Reader, now time.Time) (BackupInfo, *fsmSnapshot, error) {
	body, snap, err := openBackup(r, s.secrets.AcceptedKEKs(keyring.InfoBackup), s.secrets.AcceptedKEKs(keyring.InfoRaft))
	if err != nil {
		return BackupInfo{}, nil, err
	}
	info := body.BackupInfo
	info.ClusterID, info.Commands = snap.body.ClusterID, snap.body.Commands
	info.Keys, info.Drains, info.Acme = len(snap.keys), len(snap.body.Drains), len(snap.acme)
	refuse := func(format string, args ...any) (BackupInfo, *fsmSnapshot, error) {
		snap.Release()
		return info, nil, fmt.Errorf("%w: %s", ErrBackup, fmt.Sprintf(format, args...))
	}
	if what := command.UnknownIn(snap.body.Commands, s.fsm.commands); what != "" {
		return refuse("it holds %s, which this node does not apply (it knows %s): upgrade tether first", what, s.fsm.commands.Describe())
	}
	for _, e := range snap.acme {
		if !e.Secret && acmeSecretName(e.Name) {
			return refuse("ACME entry %q is not marked secret: accounts and certificates hold private keys and are always saved wrapped", e.Name)
		}
	}
	if c := snap.body.Clock; c.After(now.Add(maxBackupClockAhead)) {
		return refuse("its committed clock %s is %s ahead of the cluster's time %s: keys would neither activate nor rotate until then",
			c.UTC().Format(time.RFC3339), c.Sub(now).Round(time.Second), now.UTC().Format(time.RFC3339))
	}
	return info, snap, nil
}

// acmeSecretName reports whether an ACME entry of this name holds a
// private key (the account, a certificate with its key: node/leader/acme.go names
// them so) and so must be secret.
func acmeSecretName(name string) bool {
	return strings.HasPrefix(name, "account/") || strings.HasPrefix(name, "cert/")
}

// Restored is what a restore applied: the backup's info (from its decoded
// state), the keys the running cluster had revoked that stay revoked, and
// the keys of the running cluster it kept (the active key, once the
// cluster revoked any: the replacement of a revoked key).
type Restored struct {
	BackupInfo
	KeptRevoked []string `json:"kept_revoked"`
	KeptKeys    []string `json:"kept_keys"`
}

// RestoreBackup replaces the replicated state with a backup's, through
// Raft: the leader takes it and followers install it as a snapshot. The
// file is authenticated and checked first (checkBackup, at now, the
// cluster's time): raft stops a node whose state machine fails to
// restore. The cluster keeps its own id, membership and secrets, and its
// revocations: a key it revoked stays revoked (mergeRevoked). Only the
// leader restores.
func (s *Store) RestoreBackup(r io.Reader, now time.Time, timeout time.Duration) (Restored, error) {
	info, snap, err := s.checkBackup(r, now)
	if err != nil {
		return Restored{BackupInfo: info}, err
	}
	defer snap.Release()
	if !s.IsLeader() {
		return Restored{BackupInfo: info}, ErrNotLeader
	}
	running := s.ring.Snapshot()
	defer func() {
		for _, k := range running {
			clear(k.Material)
		}
	}()
	var res Restored
	snap.keys, res.KeptRevoked, res.KeptKeys = mergeRevoked(snap.keys, running, s.ring.ActiveKeyID(now))
	snap.body.ClusterID = s.fsm.ClusterID()
	snap.body.Requests = nil
	s.fsm.mu.RLock()
	snap.body.Secrets, snap.body.SecretsRemoved = slices.Clone(s.fsm.secretRecs), slices.Clone(s.fsm.secretsRemoved)
	// What the cluster applied stays named: the kept revocations and
	// secrets are its state too.
	snap.body.Commands = command.UnionSets(snap.body.Commands, CommandSet(s.fsm.applied))
	s.fsm.mu.RUnlock()
	// A restore writes every command of its set at once: as a write, it
	// waits until every member applies each (the command gate), or a
	// member would stop at the snapshot until upgraded.
	if err := s.gateSet(snap.body.Commands); err != nil {
		return Restored{BackupInfo: info}, err
	}
	snap.kek = s.secrets.KEK(keyring.InfoRaft)
	state, err := snap.encode()
	if err != nil {
		return Restored{BackupInfo: info}, fmt.Errorf("store: restore: %w", err)
	}
	info.Keys = len(snap.keys)
	res.BackupInfo = info
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: int64(len(state))}
	if err := s.raft.Restore(meta, bytes.NewReader(slices.Clip(state)), timeout); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return res, ErrNotLeader
		}
		return res, fmt.Errorf("store: restore: %w", err)
	}
	s.logger.Warn("replicated state restored from a backup", "from_cluster", info.ClusterID, "from_node", info.Node,
		"saved", info.Saved, "keys", info.Keys, "drains", info.Drains, "kept_revoked", res.KeptRevoked, "kept_keys", res.KeptKeys)
	return res, nil
}

// mergeRevoked is the keyring a restore installs: the backup's keys, with
// every key the running cluster revoked revoked (those the backup lacks
// are added, revoked, so no later restore brings them back either), and,
// once the running cluster revoked any key, its active key (a revoked
// key's replacement), so a restore never leaves the cluster without the
// key that replaced one it revoked. It returns the ids kept revoked and
// the ids of running keys kept, sorted.
func mergeRevoked(backup, running []keyring.Key, active string) (keys []keyring.Key, keptRevoked, kept []string) {
	in := make(map[string]int, len(backup))
	keys = slices.Clone(backup)
	for i, k := range keys {
		in[k.ID] = i
	}
	anyRevoked := false
	for _, k := range running {
		if !k.Revoked {
			continue
		}
		anyRevoked = true
		if i, ok := in[k.ID]; ok {
			if !keys[i].Revoked {
				keys[i].Revoked = true
				keptRevoked = append(keptRevoked, k.ID)
			}
			continue
		}
		k.Material = slices.Clone(k.Material)
		keys = append(keys, k)
		in[k.ID] = len(keys) - 1
		keptRevoked = append(keptRevoked, k.ID)
	}
	if anyRevoked && active != "" {
		if _, ok := in[active]; !ok {
			for _, k := range running {
				if k.ID == active {
					k.Material = slices.Clone(k.Material)
					keys = append(keys, k)
					kept = append(kept, k.ID)
				}
			}
		}
	}
	slices.Sort(keptRevoked)
	return keys, keptRevoked, kept
}

// gateSet passes each command of set through the command gate
// (SetCommandGate).
func (s *Store) gateSet(set CommandSet) error {
	g := s.gate.Load()
	if g == nil {
		return nil
	}
	for i := 0; i < len(set); i++ {
		if command.CharVersion(set[i]) == 0 {
			continue
		}
		if cmd := commandOfType(byte(i + 1)); cmd != nil {
			if err := (*g)(cmd); err != nil {
				return fmt.Errorf("restore: %w", err)
			}
		}
	}
	return nil
}

// commandOfType is a command of type typ (nil: not one this binary
// writes), for the command gate.
func commandOfType(typ byte) Command {
	for _, c := range []Command{InstallKey{}, ActivateKey{}, RevokeKey{}, PruneKeys{}, SetDrain{}, ClearDrain{},
		SetClusterID{}, AcmeWrite{}, SetClock{}, ClusterSecret{}} {
		if command.TypeOf(c) == typ {
			return c
		}
	}
	return nil
}
