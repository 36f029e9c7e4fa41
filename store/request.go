package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrRequestReused: a request id the cluster remembers for one request came
// with another (another method, path or body, or another command). The
// write is refused, nothing changes: a retry repeats its request exactly,
// a new request takes a new id.
var ErrRequestReused = errors.New("store: request id already used for another request")

// maxBindLen bounds a request binding on the wire (BindRequest makes 32
// hex digits).
const maxBindLen = 64

// BindRequest is the binding of a client's request to its request id: a
// digest of its method, path and body. The FSM remembers it with the id,
// and the same id with another binding is ErrRequestReused on every node.
func BindRequest(method, path string, body []byte) string {
	bh := sha256.Sum256(body)
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%x", method, path, bh)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// contentBinding binds a command written by tether itself (no client
// request behind it) to its id: a digest of what it does, key material
// left out. Two writes with the same id and the same effect (a retry) bind
// alike whoever generated them.
func contentBinding(cmd Command) string {
	var b strings.Builder
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	b.WriteString(typeName(typeOf(cmd)))
	switch c := cmd.(type) {
	case InstallKey:
		fmt.Fprintf(&b, "|%s|%s|%s|%s", c.Key.ID, ts(c.Key.Created), ts(c.Key.Activates), ts(c.Key.Expires))
	case ActivateKey:
		fmt.Fprintf(&b, "|%s|%s", c.ID, ts(c.At))
	case RevokeKey:
		fmt.Fprintf(&b, "|%s", c.ID)
		if c.Replacement != nil {
			fmt.Fprintf(&b, "|%s", c.Replacement.ID)
		}
	case PruneKeys:
		fmt.Fprintf(&b, "|%s", ts(c.Now))
	case SetDrain:
		fmt.Fprintf(&b, "|%q|%q|%s", c.Cluster, c.Destination, ts(c.Deadline))
	case ClearDrain:
		fmt.Fprintf(&b, "|%q|%q", c.Cluster, c.Destination)
	case SetClusterID:
		fmt.Fprintf(&b, "|%q", c.ID)
	case AcmeWrite:
		for _, e := range c.Put {
			fmt.Fprintf(&b, "|put %q %t %x", e.Name, e.Secret, sha256.Sum256(e.Value))
		}
		for _, name := range c.Delete {
			fmt.Fprintf(&b, "|delete %q", name)
		}
	case SetClock:
		fmt.Fprintf(&b, "|%s", ts(c.At))
	case ClusterSecret:
		fmt.Fprintf(&b, "|%q|%q", c.Op, c.ID)
	}
	h := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(h[:16])
}

// envelope is what every command body carries, whatever its type: a JSON
// object with the request id ("req") and its binding ("bind"). A node reads
// it from entries of types it does not know, so the entries it skips are
// remembered as every other node remembers them.
type envelope struct {
	ReqID string `json:"req"`
	Bind  string `json:"bind,omitempty"`
}

// readEnvelope reads the request id and binding of an entry's body.
func readEnvelope(body []byte) (envelope, error) {
	var e envelope
	if err := json.Unmarshal(body, &e); err != nil {
		return envelope{}, err
	}
	if e.ReqID == "" || len(e.ReqID) > maxReqIDLen {
		return envelope{}, fmt.Errorf("request id of %d bytes, want 1-%d", len(e.ReqID), maxReqIDLen)
	}
	if err := checkBind(e.Bind); err != nil {
		return envelope{}, err
	}
	return e, nil
}

// checkBind refuses a binding that is not (at most maxBindLen) lowercase
// hex digits, as BindRequest and contentBinding make.
func checkBind(bind string) error {
	if len(bind) > maxBindLen {
		return fmt.Errorf("request binding of %d bytes, at most %d", len(bind), maxBindLen)
	}
	for i := 0; i < len(bind); i++ {
		if c := bind[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("request binding %q: not lowercase hex", bind)
		}
	}
	return nil
}

// withBinding adds "bind" to an encoded entry (type, version, JSON
// object), as its last member: it is the one a decoder keeps.
func withBinding(entry []byte, bind string) ([]byte, error) {
	if bind == "" {
		return entry, nil
	}
	if err := checkBind(bind); err != nil {
		return nil, err
	}
	if len(entry) < 2 {
		return nil, errors.New("command entry too short")
	}
	body := bytes.TrimSpace(entry[2:])
	if len(body) < 2 || body[0] != '{' || body[len(body)-1] != '}' {
		return nil, errors.New("command body is not a JSON object")
	}
	inner := bytes.TrimSpace(body[1 : len(body)-1])
	field, _ := json.Marshal(bind)
	out := make([]byte, 0, len(entry)+len(field)+10)
	out = append(out, entry[:2]...)
	out = append(out, '{')
	out = append(out, inner...)
	if len(inner) > 0 {
		out = append(out, ',')
	}
	out = append(out, `"bind":`...)
	out = append(out, field...)
	return append(out, '}'), nil
}

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
	e, err := readEnvelope(body)
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
