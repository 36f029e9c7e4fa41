package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/internal/atomicfile"
	"github.com/tether-proxy/tether/keyring"
	adminapi "github.com/tether-proxy/tether/node/admin"
	"github.com/tether-proxy/tether/node/leader"
	"github.com/tether-proxy/tether/store"
)

// Rotating the cluster secret (docs/OPERATIONS.md, "Rotate the cluster
// secret", has the procedure), as Consul rotates its gossip
// keyring: install a new secret on every node, use it, remove the old one.
//
// The change travels through Raft (store.ClusterSecret): the new secret is
// wrapped under the one in use and committed, so every node learns it in
// log order, including a node that was down during the change (it catches
// up from the log or a snapshot while the old secret is still accepted).
// The raw secret travels only from the CLI to the node it talks to: that
// node wraps it before a follower forwards the write to the leader.
//
// Each node keeps the secrets it holds (keyring.Secrets) in its data dir,
// in cluster-secrets.json (mode 0600, like the secret file), once they
// differ from its --cluster-secret-file: a restart with the old file then
// still runs on the cluster's secret, and a file holding a removed secret
// is not taken for the cluster's. The file is removed again once the
// secret file holds the primary and the node keeps no other secret.
//
// The leader makes a secret primary only once every alive member gossips
// that it accepts it (meta "sk"), and removes one only once every Raft
// server and alive member gossips another primary; a server that is down
// holds the removal back (409, naming it) unless forced.

const (
	// secretsFile is the file in the data dir that keeps the held secrets.
	secretsFile = "cluster-secrets.json"
	// secretWait bounds how long use and remove wait for members to
	// catch up before they answer 409 naming the ones behind.
	secretWait = 10 * time.Second
	// raftHandshakeVersion is the newest Raft handshake this binary speaks.
	raftHandshakeVersion = 2
)

// Values of --raft-handshake-v1.
const (
	// HandshakeV1Auto accepts handshake version 1 (peers of releases that
	// predate the cluster id check) until every member speaks version 2.
	HandshakeV1Auto = "auto"
	// HandshakeV1Refuse never accepts it.
	HandshakeV1Refuse = "refuse"
)

// checkHandshakeV1 validates --raft-handshake-v1 and fills its default.
func (c *Config) checkHandshakeV1() error {
	switch c.RaftHandshakeV1 {
	case "":
		c.RaftHandshakeV1 = HandshakeV1Auto
	case HandshakeV1Auto, HandshakeV1Refuse:
	default:
		return fmt.Errorf("--raft-handshake-v1 %q: want auto (accept it until every member speaks version 2) or refuse", c.RaftHandshakeV1)
	}
	return nil
}

type secretsOnDisk struct {
	Version int                  `json:"version"`
	Secrets []keyring.HeldSecret `json:"secrets"`
}

func (n *Node) secretsPath() string { return filepath.Join(n.cfg.DataDir, secretsFile) }

// openSecrets builds the node's secrets from its secret file and the ones
// it kept in its data dir.
func (n *Node) openSecrets(fileSecret []byte) error {
	n.secretsWake = make(chan struct{}, 1)
	n.fileSecretID = keyring.SecretID(fileSecret)
	path := n.secretsPath()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		n.secrets, err = keyring.NewSecrets(fileSecret)
		return err
	}
	if err != nil {
		return fmt.Errorf("cluster secrets: %w", err)
	}
	var d secretsOnDisk
	if err := json.Unmarshal(b, &d); err != nil || d.Version != 1 {
		return fmt.Errorf("cluster secrets %s: not a file this tether wrote (version %d, %v): move it away to start from --cluster-secret-file alone", path, d.Version, err)
	}
	held := d.Secrets
	i := slices.IndexFunc(held, func(h keyring.HeldSecret) bool { return h.ID == n.fileSecretID })
	switch {
	case i < 0:
		// A secret the node has not seen: accepted, and the cluster's
		// state says which one is primary once Raft restores it.
		held = append(held, keyring.HeldSecret{ID: n.fileSecretID, State: keyring.SecretInstalled, Secret: fileSecret})
		n.log.Info("the secret in --cluster-secret-file is new to this node: accepted beside the secrets in its data dir until the cluster's state says which is in use",
			"secret_id", n.fileSecretID, "file", path)
	case held[i].State == keyring.SecretRetired:
		primary := held[slices.IndexFunc(held, func(h keyring.HeldSecret) bool { return h.State == keyring.SecretPrimary })].ID
		n.log.Warn("--cluster-secret-file holds a secret the cluster removed: it is not used; this node runs on the secrets in its data dir. Put the cluster's current secret in the file",
			"file_secret_id", n.fileSecretID, "primary_secret_id", primary, "file", n.cfg.ClusterSecretFile)
	case len(held[i].Secret) == 0:
		held[i].Secret = fileSecret
	}
	if n.secrets, err = keyring.RestoreSecrets(held); err != nil {
		return fmt.Errorf("cluster secrets %s: %w", path, err)
	}
	return nil
}

// saveSecrets keeps the held secrets in the data dir, or removes the file
// when the secret file alone says everything.
func (n *Node) saveSecrets() error {
	held := n.secrets.Export()
	defer func() {
		for _, h := range held {
			clear(h.Secret)
		}
	}()
	path := n.secretsPath()
	// The secret file says it all when it holds the primary and every
	// other secret is removed and forgotten.
	alone := slices.IndexFunc(held, func(h keyring.HeldSecret) bool {
		return h.ID != n.fileSecretID && (h.State != keyring.SecretRetired || len(h.Secret) > 0)
	}) < 0
	if alone && n.secrets.PrimaryID() == n.fileSecretID {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	b, err := json.MarshalIndent(secretsOnDisk{Version: 1, Secrets: held}, "", "  ")
	if err != nil {
		return err
	}
	defer clear(b)
	return atomicfile.WriteFile(path, b, 0o600)
}

// noteSecretsChanged is the secrets' watcher: it only wakes followSecrets.
func (n *Node) noteSecretsChanged() {
	select {
	case n.secretsWake <- struct{}{}:
	default:
	}
}

// followSecrets applies every change of the held secrets to the data dir
// and to gossip until ctx ends.
func (n *Node) followSecrets(ctx context.Context) {
	defer n.bg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.secretsWake:
			n.applySecrets()
		}
	}
}

// applySecrets keeps the held secrets in the data dir, gives gossip their
// keys and gossips their ids.
func (n *Node) applySecrets() {
	if n.cfg.ClusterSecretFile == "" {
		return
	}
	if err := n.saveSecrets(); err != nil {
		n.log.Error("keeping the cluster secrets in the data dir failed: a restart with the old --cluster-secret-file may not rejoin", "file", n.secretsPath(), "error", err)
	}
	if n.members == nil {
		return
	}
	if err := n.members.SetSecrets(n.secrets.Primary(), n.secrets.Accepted()); err != nil {
		n.log.Error("gossip keys not updated", "error", err)
		return
	}
	if err := n.members.UpdateMeta(n.fillStateMeta); err != nil {
		n.log.Warn("gossiping the accepted secrets failed", "error", err)
	}
	n.log.Info("cluster secrets", "primary", n.secrets.PrimaryID(), "accepted", strings.Join(n.secrets.AcceptedIDs(), ","))
}

// raftV1Allowed is the policy for Raft handshake version 1: with auto, it
// is accepted while a Raft server or an alive member does not gossip that
// it speaks version 2 (an older release, or one not seen yet).
func (n *Node) raftV1Allowed() bool {
	if n.cfg.RaftHandshakeV1 == HandshakeV1Refuse {
		return false
	}
	if n.members == nil {
		return true // Raft on loopback only, no peer
	}
	speaks := map[string]bool{}
	for _, m := range n.members.Members() {
		speaks[m.ID] = m.RaftAuth >= raftHandshakeVersion
		if m.Alive() && !speaks[m.ID] {
			return true
		}
	}
	servers, err := n.store.Servers()
	if err != nil {
		return true
	}
	for _, s := range servers {
		if !speaks[s.ID] {
			return true
		}
	}
	return false
}

// secretState is one row of GET /v1/secrets.
type secretState struct {
	ID        string              `json:"id"`
	State     keyring.SecretState `json:"state"`
	HeldBy    []string            `json:"held_by"`
	MissingOn []string            `json:"missing_on,omitempty"`
	UsedBy    []string            `json:"used_by,omitempty"`
}

// memberSecrets is what each member gossips of its secrets: accepted ids,
// primary first ("" when it gossips none), by member id, for alive members.
func (n *Node) memberSecrets() map[string][]string {
	out := map[string][]string{}
	if n.members == nil {
		out[n.cfg.NodeID] = n.secrets.AcceptedIDs()
		return out
	}
	for _, m := range n.members.Members() {
		if !m.Alive() {
			continue
		}
		if m.ID == n.cfg.NodeID {
			out[m.ID] = n.secrets.AcceptedIDs()
			continue
		}
		var ids []string
		if m.Secrets != "" {
			ids = strings.Split(m.Secrets, ",")
		}
		out[m.ID] = ids
	}
	return out
}

// clusterSecrets is the cluster's secrets: its records, or this node's
// primary when it never changed its secret.
func (n *Node) clusterSecrets() ([]store.SecretRecord, []string) {
	recs, removed := n.store.Secrets()
	if len(recs) == 0 {
		recs = []store.SecretRecord{{ID: n.secrets.PrimaryID(), State: keyring.SecretPrimary}}
	}
	return recs, removed
}

func (n *Node) secretStates() []secretState {
	recs, _ := n.clusterSecrets()
	bySecrets := n.memberSecrets()
	ids := make([]string, 0, len(bySecrets))
	for id := range bySecrets {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]secretState, 0, len(recs))
	for _, r := range recs {
		row := secretState{ID: r.ID, State: r.State, HeldBy: []string{}}
		for _, m := range ids {
			acc := bySecrets[m]
			if slices.Contains(acc, r.ID) {
				row.HeldBy = append(row.HeldBy, m)
			} else {
				row.MissingOn = append(row.MissingOn, m)
			}
			if len(acc) > 0 && acc[0] == r.ID {
				row.UsedBy = append(row.UsedBy, m)
			}
		}
		out = append(out, row)
	}
	return out
}

func (n *Node) handleSecretsList(w http.ResponseWriter, r *http.Request) {
	setIndex(w, n.store.AppliedIndex())
	recs, removed := n.clusterSecrets()
	primary := ""
	for _, rec := range recs {
		if rec.State == keyring.SecretPrimary {
			primary = rec.ID
		}
	}
	if removed == nil {
		removed = []string{}
	}
	adminapi.WriteJSON(w, http.StatusOK, map[string]any{
		"primary": primary, "secrets": n.secretStates(), "removed": removed,
		"node": n.secrets.List(),
	})
}

// secretRequest is the body of the secret writes: the secret itself (from
// the CLI), or, between nodes, its id and, for install, the secret wrapped
// under the forwarding node's primary.
type secretRequest struct {
	Secret  string `json:"secret,omitempty"`
	ID      string `json:"id,omitempty"`
	Wrapped []byte `json:"wrapped,omitempty"`
	Under   string `json:"under,omitempty"`
	Force   bool   `json:"force,omitempty"`
}

// handleSecret takes a secret write on any node: the secret in the body
// becomes its id (wrapped for install) before the write goes to the
// leader, so the raw secret never leaves this node.
func (n *Node) handleSecret(op string) http.HandlerFunc {
	inner := n.onLeader(n.secretOnLeader(op))
	return func(w http.ResponseWriter, r *http.Request) {
		if n.cfg.ClusterSecretFile == "" {
			adminapi.WriteError(w, http.StatusConflict, "this node runs without --cluster-secret-file: it has no cluster secret to rotate")
			return
		}
		var req secretRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
			adminapi.WriteError(w, http.StatusBadRequest, `body: want {"secret": "..."} (or {"id": "..."} to use or remove a secret by its id): `+err.Error())
			return
		}
		if r.Header.Get(hdrForwardedBy) == "" && (len(req.Wrapped) > 0 || req.Under != "") {
			adminapi.WriteError(w, http.StatusBadRequest, `body: give the secret itself: {"secret": "..."}`)
			return
		}
		if req.Secret != "" {
			secret := []byte(strings.TrimSpace(req.Secret))
			if len(secret) < keyring.MinClusterSecretLen {
				adminapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("secret: %d bytes, need at least %d (make one with: openssl rand -hex 32)", len(secret), keyring.MinClusterSecretLen))
				return
			}
			req.ID = keyring.SecretID(secret)
			if op == store.SecretInstall {
				wrapped, under, err := n.secrets.WrapSecret(secret)
				if err != nil {
					adminapi.WriteError(w, http.StatusInternalServerError, "wrapping the secret: "+err.Error())
					return
				}
				req.Wrapped, req.Under = wrapped, under
			}
			clear(secret)
			req.Secret = ""
		}
		if !keyring.ValidSecretID(req.ID) {
			adminapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf(`id: %q is not a secret id (16 hex digits, as tether secret list shows)`, req.ID))
			return
		}
		if op == store.SecretInstall && len(req.Wrapped) == 0 {
			adminapi.WriteError(w, http.StatusBadRequest, `install: give the secret: {"secret": "..."}`)
			return
		}
		if r.URL.Query().Get("force") == "true" {
			req.Force = true
		}
		body, _ := json.Marshal(req)
		r2 := r.Clone(r.Context())
		r2.Body, r2.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		inner(w, r2)
	}
}

// secretOnLeader runs a secret write on the leader.
func (n *Node) secretOnLeader(op string) http.HandlerFunc {
	what := "secret " + op
	return func(w http.ResponseWriter, r *http.Request) {
		var req secretRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil || !keyring.ValidSecretID(req.ID) {
			adminapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("%s: a malformed request (%v)", what, err))
			return
		}
		if !n.lead.CaughtUp() {
			n.writeApplyError(w, what, leader.ErrBehind)
			return
		}
		recs, removed := n.clusterSecrets()
		i := slices.IndexFunc(recs, func(rec store.SecretRecord) bool { return rec.ID == req.ID })
		cmd := store.ClusterSecret{ReqID: requestID(r), Op: op, ID: req.ID}
		// The request id binds to the secret's id and the force flag, not
		// to the body, which carries the secret wrapped anew by each try.
		canon, _ := json.Marshal(map[string]any{"id": req.ID, "force": req.Force})
		bind := store.BindRequest(r.Method, r.URL.Path, canon)
		if err := n.store.CheckRequest(cmd.ReqID, bind); err != nil {
			n.writeApplyError(w, what, err)
			return
		}
		switch op {
		case store.SecretInstall:
			if i >= 0 {
				n.answerSecret(w, req.ID, 0, "the cluster holds this secret already")
				return
			}
			secret, err := n.secrets.UnwrapSecret(req.ID, req.Wrapped)
			if err != nil {
				adminapi.WriteError(w, http.StatusBadRequest, what+": the wrapped secret does not open with the cluster's secrets: "+err.Error())
				return
			}
			if len(recs) >= keyring.MaxSecrets {
				adminapi.WriteError(w, http.StatusConflict, fmt.Sprintf("%s: the cluster holds %d secrets, at most %d: remove one first (tether secret remove)", what, len(recs), keyring.MaxSecrets))
				return
			}
			cmd.Wrapped, cmd.Under, err = n.secrets.WrapSecret(secret)
			clear(secret)
			if err != nil {
				adminapi.WriteError(w, http.StatusInternalServerError, what+": "+err.Error())
				return
			}
		case store.SecretUse:
			if i < 0 {
				adminapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("%s: the cluster holds no secret %s: install it first (tether secret install FILE)", what, req.ID))
				return
			}
			if recs[i].State == keyring.SecretPrimary {
				n.answerSecret(w, req.ID, 0, "the secret is in use already")
				return
			}
			if behind := n.waitSecretMembers(r.Context(), func(acc []string) bool { return slices.Contains(acc, req.ID) }); len(behind) > 0 {
				adminapi.WriteError(w, http.StatusConflict, fmt.Sprintf("%s: secret %s is not held yet by %s (they gossip the secrets they accept): wait for them, or remove them from the cluster", what, req.ID, strings.Join(behind, ", ")))
				return
			}
		case store.SecretRemove:
			if i < 0 {
				if slices.Contains(removed, req.ID) {
					n.answerSecret(w, req.ID, 0, "the secret was removed already")
					return
				}
				adminapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("%s: the cluster holds no secret %s", what, req.ID))
				return
			}
			if recs[i].State == keyring.SecretPrimary {
				adminapi.WriteError(w, http.StatusConflict, fmt.Sprintf("%s: secret %s is the one in use: make another one primary first (tether secret use FILE)", what, req.ID))
				return
			}
			primary := recs[slices.IndexFunc(recs, func(rec store.SecretRecord) bool { return rec.State == keyring.SecretPrimary })].ID
			if behind := n.waitSecretMembers(r.Context(), func(acc []string) bool { return len(acc) > 0 && acc[0] == primary }); len(behind) > 0 {
				adminapi.WriteError(w, http.StatusConflict, fmt.Sprintf("%s: %s do not use secret %s yet: wait for them, or remove them from the cluster", what, strings.Join(behind, ", "), primary))
				return
			}
			if down := n.downServers(); len(down) > 0 && !req.Force {
				adminapi.WriteError(w, http.StatusConflict, fmt.Sprintf("%s: Raft servers %s are down: they catch up with the new secret once started (the old one is still accepted until it is removed); start them first, remove them from the cluster, or force the removal (--force), after which each needs the new secret in its --cluster-secret-file", what, strings.Join(down, ", ")))
				return
			}
		}
		c, err := n.store.CommitRequest(cmd, bind)
		if err != nil {
			if errors.Is(err, store.ErrUnknownSecret) || errors.Is(err, store.ErrSecretInUse) || errors.Is(err, store.ErrTooManySecrets) {
				adminapi.WriteError(w, http.StatusConflict, what+": "+err.Error())
				return
			}
			n.writeApplyError(w, what, err)
			return
		}
		n.log.Info("cluster secret changed", "op", op, "secret_id", req.ID, "index", c.Index)
		// Answer once every alive member shows the change in gossip (or
		// the wait ends): the table then says where it stands.
		settled := map[string]func([]string) bool{
			store.SecretInstall: func(acc []string) bool { return slices.Contains(acc, req.ID) },
			store.SecretUse:     func(acc []string) bool { return len(acc) > 0 && acc[0] == req.ID },
			store.SecretRemove:  func(acc []string) bool { return !slices.Contains(acc, req.ID) },
		}[op]
		note := ""
		if behind := n.waitSecretMembers(r.Context(), settled); len(behind) > 0 {
			note = fmt.Sprintf("committed; %s do not show it in gossip yet", strings.Join(behind, ", "))
		}
		n.answerSecret(w, req.ID, c.Index, note)
	}
}

// answerSecret answers a secret write with the cluster's secrets.
// An answer that committed nothing (the cluster holds it already) carries
// the applied index its secrets reflect.
func (n *Node) answerSecret(w http.ResponseWriter, id string, index uint64, note string) {
	if index == 0 {
		index = n.store.AppliedIndex()
	}
	setCommitted(w, index)
	body := map[string]any{"id": id, "secrets": n.secretStates()}
	if note != "" {
		body["note"] = note
	}
	adminapi.WriteJSON(w, http.StatusOK, body)
}

// waitSecretMembers waits (secretWait at most) until every alive member's
// gossiped secrets satisfy ok, and returns those that do not.
func (n *Node) waitSecretMembers(ctx context.Context, ok func(accepted []string) bool) []string {
	deadline := time.Now().Add(secretWait)
	for {
		var behind []string
		for id, acc := range n.memberSecrets() {
			if !ok(acc) {
				behind = append(behind, id)
			}
		}
		slices.Sort(behind)
		if len(behind) == 0 || time.Now().After(deadline) {
			return behind
		}
		select {
		case <-ctx.Done():
			return behind
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// downServers are the Raft servers gossip does not see alive.
func (n *Node) downServers() []string {
	servers, err := n.store.Servers()
	if err != nil {
		return nil
	}
	alive := n.memberSecrets()
	var down []string
	for _, s := range servers {
		if _, ok := alive[s.ID]; !ok {
			down = append(down, s.ID)
		}
	}
	slices.Sort(down)
	return down
}

// secretCollector exposes the refused connections and the held secrets.
type secretCollector struct {
	n                    *Node
	raft, gossip, secret *prometheus.Desc
}

func newSecretCollector(n *Node) *secretCollector {
	return &secretCollector{
		n: n,
		raft: prometheus.NewDesc("tether_raft_connections_refused_total",
			"Connections to the Raft port refused before they proved the cluster secret, by reason.", []string{"reason"}, nil),
		gossip: prometheus.NewDesc("tether_gossip_streams_refused_total",
			"Streams to the gossip port refused before they proved the cluster secret, by reason.", []string{"reason"}, nil),
		secret: prometheus.NewDesc("tether_cluster_secrets",
			"Cluster secrets this node holds, by state (primary, installed, retired).", []string{"state"}, nil),
	}
}

func (c *secretCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.raft
	ch <- c.gossip
	ch <- c.secret
}

func (c *secretCollector) Collect(ch chan<- prometheus.Metric) {
	for reason, v := range c.n.store.Refused() {
		ch <- prometheus.MustNewConstMetric(c.raft, prometheus.CounterValue, float64(v), reason)
	}
	if c.n.members != nil {
		for reason, v := range c.n.members.StreamsRefused() {
			ch <- prometheus.MustNewConstMetric(c.gossip, prometheus.CounterValue, float64(v), reason)
		}
	}
	by := map[keyring.SecretState]float64{keyring.SecretPrimary: 0, keyring.SecretInstalled: 0, keyring.SecretRetired: 0}
	for _, h := range c.n.secrets.List() {
		by[h.State]++
	}
	for st, v := range by {
		ch <- prometheus.MustNewConstMetric(c.secret, prometheus.GaugeValue, v, string(st))
	}
}
