package command

import (
	"encoding/json"
	"fmt"

	"github.com/tether-proxy/tether/keyring"
)

// The ACME state is a small replicated map of named values that the
// leader's ACME manager writes and every node reads: the account, each
// certificate with its private key, the challenges being validated and
// the manager's status. The store does not interpret the values; secret
// ones (private keys) travel in the log and rest in snapshots wrapped with
// the cluster secret's key-encryption key, bound to their name.

// AcmeWrite puts entries and deletes names of the ACME state in one log
// entry. Deleting a missing name is a no-op.
type AcmeWrite struct {
	ReqID  string
	Put    []AcmeEntry
	Delete []string
}

// AcmeEntry is one named value of the ACME state. Secret values are
// wrapped with the KEK in the log and in snapshots.
type AcmeEntry struct {
	Name   string
	Secret bool
	Value  []byte
}

func (AcmeWrite) isCommand() {}

// Bounds of an ACME write: a certificate chain with its key is a few KiB.
const (
	MaxAcmeValue   = 64 << 10
	maxAcmeChanges = 64 // puts plus deletes in one write
)

type wireAcme struct {
	ReqID  string          `json:"req"`
	Put    []WireAcmeEntry `json:"put,omitempty"`
	Delete []string        `json:"delete,omitempty"`
}

type WireAcmeEntry struct {
	Name   string `json:"name"`
	Secret bool   `json:"secret,omitempty"`
	Value  []byte `json:"value"` // wrapped when Secret
}

// acmePurpose binds a wrapped value to its name.
func acmePurpose(name string) string { return "tether acme " + name }

func WrapAcme(kek []byte, es []AcmeEntry) ([]WireAcmeEntry, error) {
	out := make([]WireAcmeEntry, 0, len(es))
	for _, e := range es {
		v := e.Value
		if e.Secret {
			w, err := keyring.WrapBlob(kek, acmePurpose(e.Name), e.Value)
			if err != nil {
				return nil, err
			}
			v = w
		}
		out = append(out, WireAcmeEntry{e.Name, e.Secret, v})
	}
	return out, nil
}

func UnwrapAcme(keks [][]byte, ws []WireAcmeEntry) ([]AcmeEntry, error) {
	out := make([]AcmeEntry, 0, len(ws))
	for _, w := range ws {
		if err := checkNames("acme entry name", w.Name); err != nil {
			return nil, err
		}
		v := w.Value
		if w.Secret {
			p, err := keyring.UnwrapBlobAny(keks, acmePurpose(w.Name), w.Value)
			if err != nil {
				return nil, fmt.Errorf("acme entry %q: %w", w.Name, err)
			}
			v = p
		}
		if len(v) > MaxAcmeValue {
			return nil, fmt.Errorf("acme entry %q: %d bytes, at most %d", w.Name, len(v), MaxAcmeValue)
		}
		out = append(out, AcmeEntry{w.Name, w.Secret, v})
	}
	return out, nil
}

func encodeAcme(kek []byte, c AcmeWrite) ([]byte, error) {
	put, err := WrapAcme(kek, c.Put)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(wireAcme{c.ReqID, put, c.Delete})
	if err != nil {
		return nil, err
	}
	typ := TypeAcmeWrite
	if commandSpecs[typ].ignorable {
		typ |= FlagIgnorable
	}
	out := append([]byte{typ, commandSpecs[TypeAcmeWrite].version}, b...)
	if _, err := Decode(kek, out); err != nil { // refuse to log what no node could apply
		return nil, err
	}
	return out, nil
}

func decodeAcme(keks [][]byte, ver byte, body []byte) (Command, error) {
	if ver != bodyVersion {
		return nil, fmt.Errorf("command type %d: body version %d, want %d", TypeAcmeWrite, ver, bodyVersion)
	}
	var w wireAcme
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, fmt.Errorf("command type %d: %w", TypeAcmeWrite, err)
	}
	if w.ReqID == "" || len(w.ReqID) > maxReqIDLen {
		return nil, fmt.Errorf("command type %d: request id of %d bytes, want 1-%d", TypeAcmeWrite, len(w.ReqID), maxReqIDLen)
	}
	if n := len(w.Put) + len(w.Delete); n == 0 || n > maxAcmeChanges {
		return nil, fmt.Errorf("command type %d: %d changes, want 1-%d", TypeAcmeWrite, n, maxAcmeChanges)
	}
	put, err := UnwrapAcme(keks, w.Put)
	if err != nil {
		return nil, fmt.Errorf("command type %d: %w", TypeAcmeWrite, err)
	}
	for _, n := range w.Delete {
		if err := checkNames("acme entry name", n); err != nil {
			return nil, fmt.Errorf("command type %d: %w", TypeAcmeWrite, err)
		}
	}
	return AcmeWrite{ReqID: w.ReqID, Put: put, Delete: w.Delete}, nil
}
