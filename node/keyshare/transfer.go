package keyshare

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/keyring"
)

// Key transfer: a node that meets a value under a key id it does not hold
// asks the leader over gossip (memberlist's encryption, keyed from the
// cluster secret), and the leader answers with the keys wrapped with a KEK
// derived from the cluster secret in use (keyring.InfoTransfer; the asker
// opens it with any secret it accepts, so it works during a rotation): the material
// never travels in clear. A request names the keys the asker holds; the
// answer (version 2) carries every key it lacks and every key id the
// leader holds, so one request settles any number of key ids. A leader of
// an earlier release answers about the one key id named (ID), and a node
// of an earlier release asks without a version and reads only that.
const (
	keyRequestTag = 'k'
	keyReplyTag   = 'K'
	// keyTransferVersion is the version of the request and answer.
	keyTransferVersion = 2
)

type keyRequest struct {
	From  string `json:"f"`
	ID    string `json:"id"`
	Nonce string `json:"n"`
	// V is keyTransferVersion; 0 from a node of an earlier release.
	V int `json:"v,omitempty"`
	// Have lists the key ids the asker holds (version 2).
	Have []string `json:"h,omitempty"`
}

type keyReply struct {
	Nonce string `json:"n"`
	State string `json:"s"` // about ID: "ok", "unknown", "revoked"; "not_leader"
	// Keys is ID's key, wrapped, for a request of an earlier release.
	Keys []byte `json:"k,omitempty"`
	// Version 2: every key the asker lacks, wrapped; every key id the
	// leader holds (Held) or holds revoked (Revoked); Behind when the
	// leader has not caught up with its log (it may lack a key yet).
	V       int      `json:"v,omitempty"`
	Lacking []byte   `json:"l,omitempty"`
	Held    []string `json:"a,omitempty"`
	Revoked []string `json:"r,omitempty"`
	Behind  bool     `json:"b,omitempty"`
}

// Transfer serves and sends key requests.
type Transfer struct {
	cfg TransferConfig
	ex  *exchange[keyRequest, keyReply]
	// Sent counts the requests this node sent the leader (the node
	// registers it).
	Sent prometheus.Counter
}

// TransferConfig is what the key transfer needs of the node.
type TransferConfig struct {
	NodeID  string
	Gossip  Gossip
	Store   Store
	Ring    *keyring.Ring
	Secrets *keyring.Secrets
	// CaughtUp reports whether this node, leading, has applied its log
	// (a key id it lacks may still come otherwise).
	CaughtUp func() bool
	Log      *slog.Logger
}

// OpenTransfer registers the gossip handlers; Serve answers the requests.
func OpenTransfer(cfg TransferConfig) (*Transfer, error) {
	kt := &Transfer{cfg: cfg,
		ex: newExchange(64, parseKeyRequest, func(r keyReply) string { return r.Nonce }),
		Sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_keyring_key_requests_total",
			Help: "Requests this node sent the leader (over gossip) for keys it did not hold; each asks for every key it lacks.",
		})}
	if err := kt.ex.register(cfg.Gossip, keyRequestTag, keyReplyTag); err != nil {
		return nil, err
	}
	return kt, nil
}

// parseKeyRequest reads a request on memberlist's goroutine (a malformed
// one is dropped before it takes a place in the queue).
func parseKeyRequest(msg []byte) (keyRequest, bool) {
	var req keyRequest
	if json.Unmarshal(msg, &req) != nil || req.From == "" || req.Nonce == "" {
		return req, false
	}
	return req, true
}

// Serve answers key requests until stop.
func (kt *Transfer) Serve(stop <-chan struct{}) {
	kt.ex.serve(stop, func(req keyRequest) {
		rep := kt.answer(req)
		b, err := json.Marshal(rep)
		if err == nil {
			err = kt.cfg.Gossip.Send(req.From, keyReplyTag, b, true)
		}
		if err != nil {
			kt.cfg.Log.Debug("answering a key request failed", "to", req.From, "error", err)
		}
	})
}

// answer is the leader's answer to one request.
func (kt *Transfer) answer(req keyRequest) keyReply {
	rep := keyReply{Nonce: req.Nonce, State: "unknown"}
	if !kt.cfg.Store.IsLeader() {
		rep.State = "not_leader"
		return rep
	}
	keys := kt.cfg.Ring.Snapshot()
	defer func() {
		for _, k := range keys {
			clear(k.Material)
		}
	}()
	v2 := req.V >= keyTransferVersion
	var lacking []keyring.Key
	for _, k := range keys {
		if k.ID == req.ID {
			rep.State = "ok"
			if k.Revoked {
				rep.State = "revoked"
			} else if !v2 {
				w, err := keyring.WrapKeys(kt.cfg.Secrets.KEK(keyring.InfoTransfer), []keyring.Key{k})
				if err != nil {
					kt.cfg.Log.Warn("wrapping a key for a member failed", "error", err)
					rep.State = "unknown"
					return rep
				}
				rep.Keys = w
			}
		}
		if !v2 {
			continue
		}
		if k.Revoked {
			rep.Revoked = append(rep.Revoked, k.ID)
			continue
		}
		rep.Held = append(rep.Held, k.ID)
		if !slices.Contains(req.Have, k.ID) {
			lacking = append(lacking, k)
		}
	}
	if !v2 {
		return rep
	}
	rep.V, rep.Behind = keyTransferVersion, !kt.cfg.CaughtUp()
	if len(lacking) > 0 {
		w, err := keyring.WrapKeys(kt.cfg.Secrets.KEK(keyring.InfoTransfer), lacking)
		if err != nil {
			kt.cfg.Log.Warn("wrapping keys for a member failed", "error", err)
			return keyReply{Nonce: req.Nonce, State: "not_leader"}
		}
		rep.Lacking = w
	}
	return rep
}

// Fetch asks the leader for every key this node lacks (it holds have;
// want is the key id an earlier release's leader answers about) and waits
// for its answer or ctx.
func (kt *Transfer) Fetch(ctx context.Context, have []string, want string) (*LeaderKeys, error) {
	leader, _ := kt.cfg.Store.Leader()
	switch leader {
	case "":
		return nil, errNoKeySource
	case kt.cfg.NodeID:
		return nil, errLeaderIsSelf
	}
	nonce := newNonce()
	replies, done := kt.ex.expect(nonce)
	defer done()
	b, _ := json.Marshal(keyRequest{From: kt.cfg.NodeID, ID: want, Nonce: nonce, V: keyTransferVersion, Have: have})
	if err := kt.cfg.Gossip.Send(leader, keyRequestTag, b, true); err != nil {
		return nil, fmt.Errorf("%w: %v", errNoKeySource, err)
	}
	kt.Sent.Inc()
	rep, err := await(ctx, replies)
	if err != nil {
		return nil, err
	}
	if rep.State == "not_leader" {
		return nil, fmt.Errorf("%w: %s answered %s", errNoKeySource, leader, rep.State)
	}
	ans := &LeaderKeys{held: map[string]bool{}}
	if rep.V >= keyTransferVersion {
		for _, id := range rep.Held {
			ans.held[id] = false
		}
		for _, id := range rep.Revoked {
			ans.held[id] = true
		}
		ans.behind = rep.Behind
		if len(rep.Lacking) > 0 {
			keys, err := keyring.UnwrapKeysAny(kt.cfg.Secrets.AcceptedKEKs(keyring.InfoTransfer), rep.Lacking)
			if err != nil {
				return nil, err
			}
			ans.keys = keys
		}
		return ans, nil
	}
	// A leader of an earlier release: about want only.
	ans.only = want
	switch rep.State {
	case "ok":
		keys, err := keyring.UnwrapKeysAny(kt.cfg.Secrets.AcceptedKEKs(keyring.InfoTransfer), rep.Keys)
		if err != nil {
			return nil, err
		}
		if len(keys) != 1 || keys[0].ID != want {
			return nil, fmt.Errorf("the leader sent %d keys, not key %s", len(keys), want)
		}
		ans.keys = keys
	case "revoked":
		ans.held[want] = true
	case "unknown":
	default:
		return nil, fmt.Errorf("%w: %s answered %s", errNoKeySource, leader, rep.State)
	}
	return ans, nil
}
