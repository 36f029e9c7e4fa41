package secrets

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	adminapi "github.com/tether-proxy/tether/node/admin"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/store"
)

// Rotation is the admin API's side of rotating the cluster secret (the
// procedure is in docs/OPERATIONS.md, "Rotate the cluster secret"), as
// Consul rotates its gossip keyring: install a new secret on every node,
// use it, remove the old one. The change travels through Raft
// (store.ClusterSecret): the new secret is wrapped under the one in use and
// committed, so every node learns it in log order, including a node that
// was down during the change (it catches up from the log or a snapshot
// while the old secret is still accepted). The raw secret travels only
// from the CLI to the node it talks to: that node wraps it before a
// follower forwards the write to the leader.
//
// The leader makes a secret primary only once every alive member gossips
// that it accepts it (meta "sk"), and removes one only once every Raft
// server and alive member gossips another primary; a server that is down
// holds the removal back (409, naming it) unless forced.
type Rotation struct {
	NodeID  string
	Secrets *keyring.Secrets
	Store   Store
	// Members are the members gossip sees; nil without gossip.
	Members func() []cluster.Member
	// SecretFile is --cluster-secret-file: without one there is nothing
	// to rotate.
	SecretFile string
	Writes     Writes
	Log        *slog.Logger
}

// Store is what the rotation needs of the replicated store.
type Store interface {
	Secrets() (records []store.SecretRecord, removed []string)
	Servers() ([]store.Server, error)
	AppliedIndex() uint64
	CheckRequest(id, bind string) error
	CommitRequest(cmd store.Command, bind string) (store.Committed, error)
}

var _ Store = (*store.Store)(nil)

// Writes is the node's write path, which the secret writes go through.
type Writes struct {
	// OnLeader runs a write on the leader, forwarded when needed.
	OnLeader func(http.HandlerFunc) http.HandlerFunc
	// Forwarded reports whether a follower forwarded the request.
	Forwarded func(*http.Request) bool
	// CaughtUp reports whether this leader applied its log; ErrBehind
	// answers when not.
	CaughtUp  func() bool
	ErrBehind error
	// ApplyError answers a failed replicated write.
	ApplyError func(w http.ResponseWriter, what string, err error)
	// RequestID is the write's request id.
	RequestID func(*http.Request) string
	// SetIndex marks a read's answer with the applied index it reflects,
	// SetCommitted a write's with the index its effects are applied at.
	SetIndex, SetCommitted func(http.ResponseWriter, uint64)
}

// secretWait bounds how long use and remove wait for members to catch up
// before they answer 409 naming the ones behind.
const secretWait = 10 * time.Second

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
func (r *Rotation) memberSecrets() map[string][]string {
	out := map[string][]string{}
	if r.Members == nil {
		out[r.NodeID] = r.Secrets.AcceptedIDs()
		return out
	}
	for _, m := range r.Members() {
		if !m.Alive() {
			continue
		}
		if m.ID == r.NodeID {
			out[m.ID] = r.Secrets.AcceptedIDs()
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
func (r *Rotation) clusterSecrets() ([]store.SecretRecord, []string) {
	recs, removed := r.Store.Secrets()
	if len(recs) == 0 {
		recs = []store.SecretRecord{{ID: r.Secrets.PrimaryID(), State: keyring.SecretPrimary}}
	}
	return recs, removed
}

// secretStates are the rows of GET /v1/secrets.
func (r *Rotation) secretStates() []secretState {
	recs, _ := r.clusterSecrets()
	bySecrets := r.memberSecrets()
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

// List answers GET /v1/secrets.
func (rot *Rotation) List(w http.ResponseWriter, r *http.Request) {
	rot.Writes.SetIndex(w, rot.Store.AppliedIndex())
	recs, removed := rot.clusterSecrets()
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
		"primary": primary, "secrets": rot.secretStates(), "removed": removed,
		"node": rot.Secrets.List(),
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

// Write takes a secret write on any node: the secret in the body
// becomes its id (wrapped for install) before the write goes to the
// leader, so the raw secret never leaves this node.
func (rot *Rotation) Write(op string) http.HandlerFunc {
	inner := rot.Writes.OnLeader(rot.onLeader(op))
	return func(w http.ResponseWriter, r *http.Request) {
		if rot.SecretFile == "" {
			adminapi.WriteError(w, http.StatusConflict, "this node runs without --cluster-secret-file: it has no cluster secret to rotate")
			return
		}
		var req secretRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
			adminapi.WriteError(w, http.StatusBadRequest, `body: want {"secret": "..."} (or {"id": "..."} to use or remove a secret by its id): `+err.Error())
			return
		}
		if !rot.Writes.Forwarded(r) && (len(req.Wrapped) > 0 || req.Under != "") {
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
				wrapped, under, err := rot.Secrets.WrapSecret(secret)
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

// onLeader runs a secret write on the leader.
func (rot *Rotation) onLeader(op string) http.HandlerFunc {
	what := "secret " + op
	return func(w http.ResponseWriter, r *http.Request) {
		var req secretRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil || !keyring.ValidSecretID(req.ID) {
			adminapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("%s: a malformed request (%v)", what, err))
			return
		}
		if !rot.Writes.CaughtUp() {
			rot.Writes.ApplyError(w, what, rot.Writes.ErrBehind)
			return
		}
		recs, removed := rot.clusterSecrets()
		i := slices.IndexFunc(recs, func(rec store.SecretRecord) bool { return rec.ID == req.ID })
		cmd := store.ClusterSecret{ReqID: rot.Writes.RequestID(r), Op: op, ID: req.ID}
		// The request id binds to the secret's id and the force flag, not
		// to the body, which carries the secret wrapped anew by each try.
		canon, _ := json.Marshal(map[string]any{"id": req.ID, "force": req.Force})
		bind := store.BindRequest(r.Method, r.URL.Path, canon)
		if err := rot.Store.CheckRequest(cmd.ReqID, bind); err != nil {
			rot.Writes.ApplyError(w, what, err)
			return
		}
		switch op {
		case store.SecretInstall:
			if i >= 0 {
				rot.answer(w, req.ID, 0, "the cluster holds this secret already")
				return
			}
			secret, err := rot.Secrets.UnwrapSecret(req.ID, req.Wrapped)
			if err != nil {
				adminapi.WriteError(w, http.StatusBadRequest, what+": the wrapped secret does not open with the cluster's secrets: "+err.Error())
				return
			}
			if len(recs) >= keyring.MaxSecrets {
				adminapi.WriteError(w, http.StatusConflict, fmt.Sprintf("%s: the cluster holds %d secrets, at most %d: remove one first (tether secret remove)", what, len(recs), keyring.MaxSecrets))
				return
			}
			cmd.Wrapped, cmd.Under, err = rot.Secrets.WrapSecret(secret)
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
				rot.answer(w, req.ID, 0, "the secret is in use already")
				return
			}
			if behind := rot.waitMembers(r.Context(), func(acc []string) bool { return slices.Contains(acc, req.ID) }); len(behind) > 0 {
				adminapi.WriteError(w, http.StatusConflict, fmt.Sprintf("%s: secret %s is not held yet by %s (they gossip the secrets they accept): wait for them, or remove them from the cluster", what, req.ID, strings.Join(behind, ", ")))
				return
			}
		case store.SecretRemove:
			if i < 0 {
				if slices.Contains(removed, req.ID) {
					rot.answer(w, req.ID, 0, "the secret was removed already")
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
			if behind := rot.waitMembers(r.Context(), func(acc []string) bool { return len(acc) > 0 && acc[0] == primary }); len(behind) > 0 {
				adminapi.WriteError(w, http.StatusConflict, fmt.Sprintf("%s: %s do not use secret %s yet: wait for them, or remove them from the cluster", what, strings.Join(behind, ", "), primary))
				return
			}
			if down := rot.downServers(); len(down) > 0 && !req.Force {
				adminapi.WriteError(w, http.StatusConflict, fmt.Sprintf("%s: Raft servers %s are down: they catch up with the new secret once started (the old one is still accepted until it is removed); start them first, remove them from the cluster, or force the removal (--force), after which each needs the new secret in its --cluster-secret-file", what, strings.Join(down, ", ")))
				return
			}
		}
		c, err := rot.Store.CommitRequest(cmd, bind)
		if err != nil {
			if errors.Is(err, store.ErrUnknownSecret) || errors.Is(err, store.ErrSecretInUse) || errors.Is(err, store.ErrTooManySecrets) {
				adminapi.WriteError(w, http.StatusConflict, what+": "+err.Error())
				return
			}
			rot.Writes.ApplyError(w, what, err)
			return
		}
		rot.Log.Info("cluster secret changed", "op", op, "secret_id", req.ID, "index", c.Index)
		// Answer once every alive member shows the change in gossip (or
		// the wait ends): the table then says where it stands.
		settled := map[string]func([]string) bool{
			store.SecretInstall: func(acc []string) bool { return slices.Contains(acc, req.ID) },
			store.SecretUse:     func(acc []string) bool { return len(acc) > 0 && acc[0] == req.ID },
			store.SecretRemove:  func(acc []string) bool { return !slices.Contains(acc, req.ID) },
		}[op]
		note := ""
		if behind := rot.waitMembers(r.Context(), settled); len(behind) > 0 {
			note = fmt.Sprintf("committed; %s do not show it in gossip yet", strings.Join(behind, ", "))
		}
		rot.answer(w, req.ID, c.Index, note)
	}
}

// answer answers a secret write with the cluster's secrets.
// An answer that committed nothing (the cluster holds it already) carries
// the applied index its secrets reflect.
func (r *Rotation) answer(w http.ResponseWriter, id string, index uint64, note string) {
	if index == 0 {
		index = r.Store.AppliedIndex()
	}
	r.Writes.SetCommitted(w, index)
	body := map[string]any{"id": id, "secrets": r.secretStates()}
	if note != "" {
		body["note"] = note
	}
	adminapi.WriteJSON(w, http.StatusOK, body)
}

// waitMembers waits (secretWait at most) until every alive member's
// gossiped secrets satisfy ok, and returns those that do not.
func (r *Rotation) waitMembers(ctx context.Context, ok func(accepted []string) bool) []string {
	deadline := time.Now().Add(secretWait)
	for {
		var behind []string
		for id, acc := range r.memberSecrets() {
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
func (r *Rotation) downServers() []string {
	servers, err := r.Store.Servers()
	if err != nil {
		return nil
	}
	alive := r.memberSecrets()
	var down []string
	for _, s := range servers {
		if _, ok := alive[s.ID]; !ok {
			down = append(down, s.ID)
		}
	}
	slices.Sort(down)
	return down
}

// NewCollector exposes the connections refused before they proved the
// cluster secret (raftRefused; gossipRefused, nil without gossip) and the
// secrets held.
func NewCollector(secrets *keyring.Secrets, raftRefused, gossipRefused func() map[string]uint64) prometheus.Collector {
	return &collector{
		secrets: secrets, raftRefused: raftRefused, gossipRefused: gossipRefused,
		raft: prometheus.NewDesc("tether_raft_connections_refused_total",
			"Connections to the Raft port refused before they proved the cluster secret, by reason.", []string{"reason"}, nil),
		gossip: prometheus.NewDesc("tether_gossip_streams_refused_total",
			"Streams to the gossip port refused before they proved the cluster secret, by reason.", []string{"reason"}, nil),
		secret: prometheus.NewDesc("tether_cluster_secrets",
			"Cluster secrets this node holds, by state (primary, installed, retired).", []string{"state"}, nil),
	}
}

type collector struct {
	secrets                    *keyring.Secrets
	raftRefused, gossipRefused func() map[string]uint64
	raft, gossip, secret       *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.raft
	ch <- c.gossip
	ch <- c.secret
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for reason, v := range c.raftRefused() {
		ch <- prometheus.MustNewConstMetric(c.raft, prometheus.CounterValue, float64(v), reason)
	}
	if c.gossipRefused != nil {
		for reason, v := range c.gossipRefused() {
			ch <- prometheus.MustNewConstMetric(c.gossip, prometheus.CounterValue, float64(v), reason)
		}
	}
	by := map[keyring.SecretState]float64{keyring.SecretPrimary: 0, keyring.SecretInstalled: 0, keyring.SecretRetired: 0}
	for _, h := range c.secrets.List() {
		by[h.State]++
	}
	for st, v := range by {
		ch <- prometheus.MustNewConstMetric(c.secret, prometheus.GaugeValue, v, string(st))
	}
}
