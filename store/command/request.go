package command

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

// ContentBinding binds a command written by tether itself (no client
// request behind it) to its id: a digest of what it does, key material
// left out. Two writes with the same id and the same effect (a retry) bind
// alike whoever generated them.
func ContentBinding(cmd Command) string {
	var b strings.Builder
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	b.WriteString(Name(TypeOf(cmd)))
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
	case SetConfig:
		fmt.Fprintf(&b, "|%d|%x|%q|%s", c.IfVersion, sha256.Sum256(c.Content), c.Summary, ts(c.At))
	}
	h := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(h[:16])
}

// Envelope is what every command body carries, whatever its type: a JSON
// object with the request id ("req") and its binding ("bind"). A node reads
// it from entries of types it does not know, so the entries it skips are
// remembered as every other node remembers them.
type Envelope struct {
	ReqID string `json:"req"`
	Bind  string `json:"bind,omitempty"`
}

// ReadEnvelope reads the request id and binding of an entry's body.
func ReadEnvelope(body []byte) (Envelope, error) {
	var e Envelope
	if err := json.Unmarshal(body, &e); err != nil {
		return Envelope{}, err
	}
	if e.ReqID == "" || len(e.ReqID) > maxReqIDLen {
		return Envelope{}, fmt.Errorf("request id of %d bytes, want 1-%d", len(e.ReqID), maxReqIDLen)
	}
	if err := checkBind(e.Bind); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

// checkBind refuses a binding that is not (at most maxBindLen) lowercase
// hex digits, as BindRequest and ContentBinding make.
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

// WithBinding adds "bind" to an encoded entry (type, version, JSON
// object), as its last member: it is the one a decoder keeps.
func WithBinding(entry []byte, bind string) ([]byte, error) {
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
