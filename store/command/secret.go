package command

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tether-proxy/tether/keyring"
)

// Operations of a ClusterSecret command.
const (
	SecretInstall = "install"
	SecretUse     = "use"
	SecretRemove  = "remove"
)

// ClusterSecret changes the cluster's secrets: Op SecretInstall adds secret
// ID (Wrapped under secret Under, keyring.Secrets.WrapSecret), SecretUse
// makes it the primary, SecretRemove drops it. Installing a secret the
// cluster holds, using the primary and removing a secret already removed
// change nothing.
type ClusterSecret struct {
	ReqID   string
	Op      string
	ID      string
	Wrapped []byte
	Under   string
}

func (ClusterSecret) isCommand() {}

type wireSecret struct {
	ReqID   string `json:"req"`
	Op      string `json:"op"`
	ID      string `json:"id"`
	Wrapped []byte `json:"wrapped,omitempty"`
	Under   string `json:"under,omitempty"`
}

func encodeSecret(c ClusterSecret) ([]byte, error) {
	b, err := json.Marshal(wireSecret{c.ReqID, c.Op, c.ID, c.Wrapped, c.Under})
	if err != nil {
		return nil, err
	}
	out := append([]byte{TypeClusterSecret, commandSpecs[TypeClusterSecret].version}, b...)
	if _, err := decodeSecret(out[1], out[2:]); err != nil { // refuse to log what no node could apply
		return nil, err
	}
	return out, nil
}

func decodeSecret(ver byte, body []byte) (Command, error) {
	if ver != commandSpecs[TypeClusterSecret].version {
		return nil, fmt.Errorf("command type %d: body version %d, want %d", TypeClusterSecret, ver, commandSpecs[TypeClusterSecret].version)
	}
	var w wireSecret
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, fmt.Errorf("command type %d: %w", TypeClusterSecret, err)
	}
	var err error
	switch {
	case w.ReqID == "" || len(w.ReqID) > maxReqIDLen:
		err = fmt.Errorf("request id of %d bytes, want 1-%d", len(w.ReqID), maxReqIDLen)
	case !keyring.ValidSecretID(w.ID):
		err = fmt.Errorf("secret id %q is not 16 hex digits", w.ID)
	case w.Op == SecretInstall && (len(w.Wrapped) == 0 || len(w.Wrapped) > 4096 || !keyring.ValidSecretID(w.Under)):
		err = errors.New("install: needs the secret wrapped (at most 4096 bytes) and the id it is wrapped under")
	case w.Op != SecretInstall && (len(w.Wrapped) > 0 || w.Under != ""):
		err = fmt.Errorf("%s: unexpected wrapped secret", w.Op)
	case w.Op != SecretInstall && w.Op != SecretUse && w.Op != SecretRemove:
		err = fmt.Errorf("unknown operation %q", w.Op)
	}
	if err != nil {
		return nil, fmt.Errorf("command type %d: %w", TypeClusterSecret, err)
	}
	return ClusterSecret{w.ReqID, w.Op, w.ID, w.Wrapped, w.Under}, nil
}
