package cluster

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/hashicorp/memberlist"
)

// Meta is a node's metadata, gossiped as JSON in memberlist's node meta. It
// must encode to at most memberlist.MetaMaxSize (512) bytes; Open and
// UpdateMeta refuse anything larger.
type Meta struct {
	ID        string `json:"id"`
	RaftAddr  string `json:"raft"`
	AdminAddr string `json:"admin"`
	Version   string `json:"v"`
	ClusterID string `json:"cid,omitempty"` // "" until the node holds Raft state of a cluster
	HasState  bool   `json:"st,omitempty"`  // the node has Raft state (formation)
	Expect    int    `json:"exp,omitempty"` // its --bootstrap-expect
	Durable   uint64 `json:"di,omitempty"`  // index up to which it holds the keyring durably
	// Commands is the Raft command set its binary applies (store.CommandSet,
	// one character per command type); "" from a binary that predates it.
	// The leader writes a command only once every Raft server and every
	// alive member has it (a down server by the set it last gossiped).
	Commands string `json:"cmd,omitempty"`
	// Clock is its wall clock in whole hours since the Unix epoch: the
	// leader prunes keys only once every member's clock says their
	// retention is over. (The cluster time reads members' clocks from
	// probe acks, clock.go.)
	Clock int64 `json:"clk,omitempty"`
	// ClockMin is the same clock in whole minutes, still gossiped for
	// leaders of earlier releases, which start drain deadlines from it.
	ClockMin int64 `json:"clm,omitempty"`
	// Tickets is the TLS session ticket scheme its binary speaks: 1 seals
	// tickets under the day's random seed, which it takes from the leader
	// (and hands to a new leader) over gossip; 0, from a binary that
	// predates it, seals them under keys from the keyring alone. Every
	// node keeps to the keyring's while an alive member says 0.
	Tickets int `json:"tk,omitempty"`
	// NoPersist: the node cannot write its Raft state to disk (full or
	// read-only); its durable index is frozen, so activation passes over it.
	NoPersist bool `json:"np,omitempty"`
	// Stopped is the Raft log entry the node stopped applying at (0: none):
	// its binary cannot apply that entry's command. It is not ready and
	// holds no new key, so activation passes over it.
	Stopped uint64 `json:"sa,omitempty"`
	// Settings that must agree on every node, whichever one leads: its
	// --raft-voters, and its clusters' ProbeFanout (one number when they
	// all share it, else "h" and a digest of cluster=fanout pairs). Zero
	// or "": a binary that predates them.
	Voters int    `json:"rv,omitempty"`
	Fanout string `json:"pf,omitempty"`
	// Secrets are the ids (keyring.SecretID) of the cluster secrets the node
	// accepts, its primary first, comma-separated: the leader makes a new
	// secret primary only once every alive member accepts it, and removes
	// the old one only once none uses it. "": a binary that predates them.
	Secrets string `json:"sk,omitempty"`
	// RaftAuth is the newest Raft handshake version it speaks (2 binds the
	// cluster id); 0: a binary that predates it. Handshake version 1 is
	// refused once every member speaks 2.
	RaftAuth int `json:"ra,omitempty"`
	// ConfigVersion is the version of the cluster's config it serves (0:
	// its own file's); ConfigError, why it could not apply a newer one
	// (cut short: meta is small).
	ConfigVersion uint64 `json:"cv,omitempty"`
	ConfigError   string `json:"ce,omitempty"`
	// The formation vote, managed by Membership while Expect > 0 and the
	// node has no state (see formation.go); callers leave them alone.
	FormSet   string `json:"fs,omitempty"` // the servers it votes to bootstrap, sorted ids joined by ","
	FormPhase int    `json:"fp,omitempty"` // 1 proposed (may change), 2 committed (never changes)
}

// State is a member's gossip state as memberlist sees it.
type State string

// Member states. Suspect is memberlist's: a probe failed and the node has
// not refuted yet; it is still counted as alive by memberlist.
const (
	StateAlive   State = "alive"
	StateSuspect State = "suspect"
	StateDead    State = "dead"
	StateLeft    State = "left"
)

// Member is one node as this node sees it.
type Member struct {
	Meta
	Addr  string    // gossip ip:port
	State State     // alive, suspect, dead or left
	Since time.Time // when State last changed (local clock)
}

// Alive reports whether memberlist still counts the member in: alive or
// suspect.
func (m Member) Alive() bool { return m.State == StateAlive || m.State == StateSuspect }

// encodeMeta renders meta for gossip and checks memberlist's size limit.
func encodeMeta(m Meta) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("cluster: encode meta: %w", err)
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("cluster: node meta is %d bytes, memberlist allows %d: shorten the node id (%d bytes), raft address (%d) or admin address (%d)",
			len(b), memberlist.MetaMaxSize, len(m.ID), len(m.RaftAddr), len(m.AdminAddr))
	}
	return b, nil
}

// decodeMeta parses a peer's meta. Peers are authenticated by the gossip
// key, but a peer of another version may send anything: unknown fields are
// ignored, and a meta that does not parse is an error the caller logs.
func decodeMeta(b []byte) (Meta, error) {
	var m Meta
	if len(b) == 0 {
		return m, nil
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return Meta{}, fmt.Errorf("cluster: node meta %.40q: %w", b, err)
	}
	return m, nil
}

// validateMeta checks the local meta before it is gossiped.
func validateMeta(m Meta, nodeID string) error {
	switch {
	case strings.ContainsFunc(m.ID, func(r rune) bool { return r == ',' || unicode.IsSpace(r) || !unicode.IsPrint(r) }):
		return fmt.Errorf("cluster: node id %q: commas, spaces and control characters are not allowed", m.ID)
	case m.ID != nodeID:
		return fmt.Errorf("cluster: Meta.ID %q differs from NodeID %q", m.ID, nodeID)
	case m.Expect < 0:
		return fmt.Errorf("cluster: Meta.Expect %d is negative", m.Expect)
	case strings.TrimSpace(m.ClusterID) != m.ClusterID:
		return fmt.Errorf("cluster: Meta.ClusterID %q has surrounding spaces", m.ClusterID)
	}
	return nil
}
