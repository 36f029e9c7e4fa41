package store

import (
	"errors"
	"fmt"

	"github.com/tether-proxy/tether/store/command"
)

// ErrRequestReused: a request id the cluster remembers for one request came
// with another (another method, path or body, or another command). The
// write is refused, nothing changes: a retry repeats its request exactly,
// a new request takes a new id.
var ErrRequestReused = errors.New("store: request id already used for another request")

// reusedError is the FSM's refusal of a request id bound to another
// request.
func reusedError(id string) error {
	return fmt.Errorf("%w: request id %q was used for another request; a retry must repeat its request exactly (method, path and body), a new request needs a new id",
		ErrRequestReused, id)
}

// checkRequest refuses id when the FSM remembers it bound to another
// request; f.mu is held (read or write).
func (f *fsm) checkRequest(id, bind string) (result, bool, error) {
	r, ok := f.reqs[id]
	if !ok {
		return result{}, false, nil
	}
	if r.Bind != "" && bind != "" && r.Bind != bind {
		return r, true, reusedError(id)
	}
	return r, true, nil
}

// rememberSkipped records the request of an entry this FSM skips (an
// ignorable command it does not know), as the nodes that apply it record
// it: every node's request memory holds the same ids, in the same order,
// with the same bindings, so a later reuse or retry of the id is decided
// alike everywhere. f.mu is held.
func (f *fsm) rememberSkipped(index uint64, what string, body []byte) {
	e, err := command.ReadEnvelope(body)
	if err != nil {
		f.logger.Warn("skipped raft entry carries no request id to remember", "index", index, "err", err)
		return
	}
	if _, seen, _ := f.checkRequest(e.ReqID, e.Bind); seen {
		return
	}
	f.remember(e.ReqID, result{Code: codeSkipped, Bind: e.Bind,
		Msg: fmt.Sprintf("raft entry %d (command %s) is not applied by this version of tether, which skipped it", index, what)})
}

// requestSeen reports, on the leader, whether the FSM remembers id bound
// to another request: a write refused before it is logged. The FSM decides
// again when it applies the entry (another write may come first).
func (f *fsm) requestSeen(id, bind string) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, _, err := f.checkRequest(id, bind)
	return err
}
