package secrets

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/internal/atomicfile"
	"github.com/tether-proxy/tether/keyring"
)

const (
	// File is the file in the data dir that keeps the held secrets.
	File = "cluster-secrets.json"
	// localFile is the secret of a node without --cluster-secret-file.
	localFile = "local-secret"
)

// ReadFile reads a secret, trimming surrounding white space.
func ReadFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil, fmt.Errorf("%s is empty", path)
	}
	return []byte(s), nil
}

// Load reads --cluster-secret-file (file), or, for a node without one, a
// secret of its own kept in its data dir (it wraps key material in the
// Raft log; with the secret beside the log that is no protection at rest,
// which the start-up warning says), made on the first start.
func Load(file, dataDir string, log *slog.Logger) ([]byte, error) {
	if file != "" {
		s, err := ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("cluster secret: %w", err)
		}
		if len(s) < 16 {
			return nil, fmt.Errorf("cluster secret in %s is %d bytes: use at least 16 (e.g. `openssl rand -hex 32`)", file, len(s))
		}
		return s, nil
	}
	log.Warn("no --cluster-secret-file: this node runs alone (no other node can join it) and its keys are stored unprotected (mode 0600) in the data dir")
	path := filepath.Join(dataDir, localFile)
	if s, err := ReadFile(path); err == nil {
		return s, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("local secret: %w", err)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	s := []byte(hex.EncodeToString(b))
	if err := atomicfile.WriteFile(path, s, 0o600); err != nil {
		return nil, fmt.Errorf("local secret: %w", err)
	}
	return s, nil
}

// Gossip is what the keeper needs of the membership: the secrets' keys and
// the metadata that carries their ids.
type Gossip interface {
	SetSecrets(primary []byte, accepted [][]byte) error
	UpdateMeta(fn func(*cluster.Meta)) error
}

// Keeper keeps the cluster secrets a node holds (keyring.Secrets) in its
// data dir, in File (mode 0600, like the secret file), once they differ
// from its --cluster-secret-file: a restart with the old file then still
// runs on the cluster's secret, and a file holding a removed secret is not
// taken for the cluster's. The file is removed again once the secret file
// holds the primary and the node keeps no other secret.
type Keeper struct {
	secrets      *keyring.Secrets
	dataDir      string
	secretFile   string // --cluster-secret-file; "" for a node of its own
	fileSecretID string // the id of its secret
	log          *slog.Logger
	wake         chan struct{}

	gossip Gossip
	meta   func(*cluster.Meta)
}

// Open builds the node's secrets from its secret file (fileSecret, read
// from secretFile) and the ones it kept in dataDir; every change of them
// wakes Follow.
func Open(dataDir, secretFile string, fileSecret []byte, log *slog.Logger) (*Keeper, error) {
	k := &Keeper{dataDir: dataDir, secretFile: secretFile, fileSecretID: keyring.SecretID(fileSecret), log: log, wake: make(chan struct{}, 1)}
	path := k.path()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if k.secrets, err = keyring.NewSecrets(fileSecret); err != nil {
			return nil, err
		}
		k.secrets.Watch(k.changed)
		return k, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster secrets: %w", err)
	}
	var d onDisk
	if err := json.Unmarshal(b, &d); err != nil || d.Version != 1 {
		return nil, fmt.Errorf("cluster secrets %s: not a file this tether wrote (version %d, %v): move it away to start from --cluster-secret-file alone", path, d.Version, err)
	}
	held := d.Secrets
	i := slices.IndexFunc(held, func(h keyring.HeldSecret) bool { return h.ID == k.fileSecretID })
	switch {
	case i < 0:
		// A secret the node has not seen: accepted, and the cluster's
		// state says which one is primary once Raft restores it.
		held = append(held, keyring.HeldSecret{ID: k.fileSecretID, State: keyring.SecretInstalled, Secret: fileSecret})
		log.Info("the secret in --cluster-secret-file is new to this node: accepted beside the secrets in its data dir until the cluster's state says which is in use",
			"secret_id", k.fileSecretID, "file", path)
	case held[i].State == keyring.SecretRetired:
		primary := held[slices.IndexFunc(held, func(h keyring.HeldSecret) bool { return h.State == keyring.SecretPrimary })].ID
		log.Warn("--cluster-secret-file holds a secret the cluster removed: it is not used; this node runs on the secrets in its data dir. Put the cluster's current secret in the file",
			"file_secret_id", k.fileSecretID, "primary_secret_id", primary, "file", secretFile)
	case len(held[i].Secret) == 0:
		held[i].Secret = fileSecret
	}
	if k.secrets, err = keyring.RestoreSecrets(held); err != nil {
		return nil, fmt.Errorf("cluster secrets %s: %w", path, err)
	}
	k.secrets.Watch(k.changed)
	return k, nil
}

type onDisk struct {
	Version int                  `json:"version"`
	Secrets []keyring.HeldSecret `json:"secrets"`
}

// Secrets are the secrets the node holds.
func (k *Keeper) Secrets() *keyring.Secrets { return k.secrets }

func (k *Keeper) path() string { return filepath.Join(k.dataDir, File) }

// UseGossip makes Apply give gossip the secrets' keys and gossip their
// ids (meta fills the node's metadata).
func (k *Keeper) UseGossip(g Gossip, meta func(*cluster.Meta)) {
	k.gossip, k.meta = g, meta
}

// Save keeps the held secrets in the data dir, or removes the file when
// the secret file alone says everything.
func (k *Keeper) Save() error {
	held := k.secrets.Export()
	defer func() {
		for _, h := range held {
			clear(h.Secret)
		}
	}()
	path := k.path()
	// The secret file says it all when it holds the primary and every
	// other secret is removed and forgotten.
	alone := slices.IndexFunc(held, func(h keyring.HeldSecret) bool {
		return h.ID != k.fileSecretID && (h.State != keyring.SecretRetired || len(h.Secret) > 0)
	}) < 0
	if alone && k.secrets.PrimaryID() == k.fileSecretID {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	b, err := json.MarshalIndent(onDisk{Version: 1, Secrets: held}, "", "  ")
	if err != nil {
		return err
	}
	defer clear(b)
	return atomicfile.WriteFile(path, b, 0o600)
}

// changed is the secrets' watcher: it only wakes Follow.
func (k *Keeper) changed() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// Follow applies every change of the held secrets until ctx ends.
func (k *Keeper) Follow(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-k.wake:
			k.Apply()
		}
	}
}

// Apply keeps the held secrets in the data dir, gives gossip their keys
// and gossips their ids.
func (k *Keeper) Apply() {
	if k.secretFile == "" {
		return
	}
	if err := k.Save(); err != nil {
		k.log.Error("keeping the cluster secrets in the data dir failed: a restart with the old --cluster-secret-file may not rejoin", "file", k.path(), "error", err)
	}
	if k.gossip == nil {
		return
	}
	if err := k.gossip.SetSecrets(k.secrets.Primary(), k.secrets.Accepted()); err != nil {
		k.log.Error("gossip keys not updated", "error", err)
		return
	}
	if err := k.gossip.UpdateMeta(k.meta); err != nil {
		k.log.Warn("gossiping the accepted secrets failed", "error", err)
	}
	k.log.Info("cluster secrets", "primary", k.secrets.PrimaryID(), "accepted", strings.Join(k.secrets.AcceptedIDs(), ","))
}
