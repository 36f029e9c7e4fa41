package node

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"time"

	adminapi "github.com/tether-proxy/tether/node/admin"
	"github.com/tether-proxy/tether/store"
)

// restoreTimeout bounds a restore through Raft (the leader writes the
// state, followers install it as a snapshot).
const restoreTimeout = 30 * time.Second

// handleSnapshotSave answers GET /v1/snapshot with a backup of the
// replicated state as this node has applied it (keys wrapped with the
// cluster secret's key-encryption key).
func (n *Node) handleSnapshotSave(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	info, err := n.store.SaveBackup(&buf, time.Now())
	if err != nil {
		adminapi.WriteError(w, http.StatusServiceUnavailable, "snapshot: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="tether-%s-%d.snapshot"`, n.cfg.NodeID, info.Index))
	w.Write(buf.Bytes())
}

// handleSnapshotRestore answers POST /v1/snapshot/restore (on the leader):
// the body, a backup, replaces the keyring, drains and ACME state of the
// whole cluster once it is authenticated with this cluster's secret and
// checked against the cluster's time. The answer says what the decoded
// state held and which keys the running cluster revoked stay revoked.
func (n *Node) handleSnapshotRestore(w http.ResponseWriter, r *http.Request) {
	now, _ := n.clock.Now()
	res, err := n.store.RestoreBackup(r.Body, now, restoreTimeout)
	if errors.Is(err, store.ErrBackup) {
		adminapi.WriteError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	if err != nil {
		n.writeApplyError(w, "restore", err)
		return
	}
	n.applyDrains()
	// The restored state is applied here from this index on: a follower
	// that forwarded the restore answers once it installed it too.
	setCommitted(w, n.store.AppliedIndex())
	adminapi.WriteJSON(w, http.StatusOK, map[string]any{"restored": res.BackupInfo, "kept_revoked": nonNil(res.KeptRevoked),
		"kept_keys": nonNil(res.KeptKeys), "active_key_id": n.ring.ActiveKeyID(time.Now())})
}

// nonNil is l, or an empty list for JSON's sake.
func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}
