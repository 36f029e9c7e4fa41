package command

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tether-proxy/tether/keyring"
)

// Command is a write to the replicated state; store.Store.Apply takes one
// of the types below. ReqID identifies the request: the FSM applies a ReqID
// once and answers a repeat with the first result, so retrying after
// store.ErrLeadershipLost is safe. Apply fills an empty ReqID with a random
// one.
type Command interface{ isCommand() }

// InstallKey installs Key (its material travels wrapped with the cluster
// secret's KEK). Installing the very same key again is a no-op.
type InstallKey struct {
	ReqID string
	Key   keyring.Key
}

// ActivateKey moves key ID's activation to At (keyring.Ring.Activate).
type ActivateKey struct {
	ReqID, ID string
	At        time.Time
}

// RevokeKey revokes key ID and, when Replacement is set, installs it in the
// same log entry (the leader already made it active), atomically.
type RevokeKey struct {
	ReqID, ID   string
	Replacement *keyring.Key
}

// PruneKeys removes the keys that no longer decrypt at Now, the leader's
// clock.
type PruneKeys struct {
	ReqID string
	Now   time.Time
}

// SetDrain drains destination Destination of cluster Cluster: no new
// sessions go to it; its sessions keep going there until Deadline.
type SetDrain struct {
	ReqID, Cluster, Destination string
	Deadline                    time.Time
}

// ClearDrain undoes SetDrain; clearing a destination that is not draining
// is a no-op.
type ClearDrain struct{ ReqID, Cluster, Destination string }

// SetClusterID records the cluster's identity. The first one wins; the same
// id again is a no-op; a different one is store.ErrClusterID.
type SetClusterID struct{ ReqID, ID string }

// SetClock makes At the committed cluster time, earlier or later than the
// one committed before: later activations count from it. The leader writes
// it to bring back a committed time far ahead of the cluster's time (one
// leader's clock that an earlier release committed).
type SetClock struct {
	ReqID string
	At    time.Time
}

func (InstallKey) isCommand() {}

func (ActivateKey) isCommand() {}

func (RevokeKey) isCommand() {}

func (PruneKeys) isCommand() {}

func (SetDrain) isCommand() {}

func (ClearDrain) isCommand() {}

func (SetClusterID) isCommand() {}

func (SetClock) isCommand() {}

// Log entry format: one byte of command type, one byte of body version,
// then the body (JSON). Types are never reused; a body change bumps its
// version. The type byte's high bit (FlagIgnorable) says that a node that
// does not know the type or version may skip the entry (Consul's
// IgnoreUnknownTypeFlag); any other entry it cannot apply stops its FSM
// (store/fsm.go) until it is upgraded. The leader writes a command only once
// every member advertises it (CommandSet, gossiped). Every body, of any
// type and version, is a JSON object with the request id ("req") and its
// binding ("bind", request.go): a node reads both from an entry it skips.
const (
	TypeInstallKey    byte = 1
	TypeActivateKey   byte = 2
	TypeRevokeKey     byte = 3
	TypePruneKeys     byte = 4
	TypeSetDrain      byte = 5
	TypeClearDrain    byte = 6
	TypeSetClusterID  byte = 7
	TypeAcmeWrite     byte = 8 // acme.go
	TypeSetClock      byte = 9
	TypeClusterSecret byte = 10            // secret.go
	TypeSetConfig     byte = 11            // config.go
	TypeMax                = TypeSetConfig // the newest type this binary knows

	bodyVersion byte = 1

	// FlagIgnorable on the type byte: older nodes may skip the entry.
	FlagIgnorable byte = 0x80

	// maxReqIDLen and maxNameLen bound the strings of a command.
	maxReqIDLen = 128 // room for a prefix plus a 64-byte key id
	maxNameLen  = 256
)

// commandSpec is how this binary writes a command type: its name, its body
// version and whether a node that does not know it may skip it. Keyring,
// drain and identity commands are not ignorable: each changes state every
// node must hold alike.
type commandSpec struct {
	name      string
	version   byte
	ignorable bool
}

var commandSpecs = [TypeMax + 1]commandSpec{
	TypeInstallKey:   {"InstallKey", bodyVersion, false},
	TypeActivateKey:  {"ActivateKey", bodyVersion, false},
	TypeRevokeKey:    {"RevokeKey", bodyVersion, false},
	TypePruneKeys:    {"PruneKeys", bodyVersion, false},
	TypeSetDrain:     {"SetDrain", bodyVersion, false},
	TypeClearDrain:   {"ClearDrain", bodyVersion, false},
	TypeSetClusterID: {"SetClusterID", bodyVersion, false},
	// ACME state matters only to nodes that serve Acme listeners; an older
	// node may skip it, and the leader writes it only once every member
	// advertises it.
	TypeAcmeWrite: {"AcmeWrite", bodyVersion, true},
	// The committed time decides when later activations take effect: every
	// node must hold the same.
	TypeSetClock: {"SetClock", bodyVersion, false},
	// A node that skipped a secret's installation could not open what is
	// wrapped under it later.
	TypeClusterSecret: {"ClusterSecret", bodyVersion, false},
	// Every node must serve the same version of the cluster's config.
	TypeSetConfig: {"SetConfig", bodyVersion, false},
}

// Name names a command type for log lines ("type 9" when unknown).
func Name(typ byte) string {
	if int(typ) < len(commandSpecs) && commandSpecs[typ].name != "" {
		return commandSpecs[typ].name
	}
	return fmt.Sprintf("type %d", typ)
}

// CommandSet is the command types and body versions a binary applies, in
// the compact form members gossip: character i is the newest body version
// of type i+1 it applies ('0': not at all; digits, then a-z). A binary
// applies every version up to the newest it names.
type CommandSet string

// Commands is the set this binary applies.
var Commands = func() CommandSet {
	b := make([]byte, TypeMax)
	for t := range b {
		b[t] = VersionChar(commandSpecs[t+1].version)
	}
	return CommandSet(b)
}()

// BaselineCommands is what a member that advertises no set applies: every
// release before members advertised one knew types 1-7 at version 1.
const BaselineCommands CommandSet = "1111111"

func VersionChar(v byte) byte {
	if v < 10 {
		return '0' + v
	}
	return 'a' + v - 10
}

// Version is the newest body version of typ the set applies (0: none).
func (c CommandSet) Version(typ byte) byte {
	if c == "" {
		c = BaselineCommands
	}
	if typ == 0 || int(typ) > len(c) {
		return 0
	}
	switch ch := c[typ-1]; {
	case ch >= '0' && ch <= '9':
		return ch - '0'
	case ch >= 'a' && ch <= 'z':
		return ch - 'a' + 10
	}
	return 0
}

// Knows reports whether the set applies entries of typ at body version ver.
func (c CommandSet) Knows(typ, ver byte) bool {
	v := c.Version(typ)
	return ver >= 1 && v >= ver
}

// Supports reports whether a node with this set applies cmd as this binary
// writes it. An empty set is BaselineCommands.
func (c CommandSet) Supports(cmd Command) bool {
	typ := TypeOf(cmd)
	return typ != 0 && c.Knows(typ, commandSpecs[typ].version)
}

// Describe names what this set applies, for log lines.
func (c CommandSet) Describe() string {
	if c == "" {
		c = BaselineCommands
	}
	return fmt.Sprintf("command types up to %d (set %s)", len(c), string(c))
}

// Requirement names the command type and body version cmd is written as,
// e.g. "SetDrain v1".
func Requirement(cmd Command) string {
	typ := TypeOf(cmd)
	return fmt.Sprintf("%s v%d", Name(typ), commandSpecs[typ].version)
}

// TypeOf is cmd's command type (0: not a command this binary writes).
func TypeOf(cmd Command) byte {
	switch cmd.(type) {
	case InstallKey:
		return TypeInstallKey
	case ActivateKey:
		return TypeActivateKey
	case RevokeKey:
		return TypeRevokeKey
	case PruneKeys:
		return TypePruneKeys
	case SetDrain:
		return TypeSetDrain
	case ClearDrain:
		return TypeClearDrain
	case SetClusterID:
		return TypeSetClusterID
	case AcmeWrite:
		return TypeAcmeWrite
	case SetClock:
		return TypeSetClock
	case ClusterSecret:
		return TypeClusterSecret
	case SetConfig:
		return TypeSetConfig
	}
	return 0
}

// Wire bodies. Key material is only ever in Wrapped (keyring.WrapKeys).
type (
	wireInstall struct {
		ReqID   string `json:"req"`
		Wrapped []byte `json:"key"`
	}
	wireActivate struct {
		ReqID string    `json:"req"`
		ID    string    `json:"id"`
		At    time.Time `json:"at"`
	}
	wireRevoke struct {
		ReqID       string `json:"req"`
		ID          string `json:"id"`
		Replacement []byte `json:"replacement,omitempty"`
	}
	wirePrune struct {
		ReqID string    `json:"req"`
		Now   time.Time `json:"now"`
	}
	wireDrain struct {
		ReqID       string    `json:"req"`
		Cluster     string    `json:"cluster"`
		Destination string    `json:"destination"`
		Deadline    time.Time `json:"deadline,omitzero"`
	}
	wireClusterID struct {
		ReqID string `json:"req"`
		ID    string `json:"id"`
	}
	wireClock struct {
		ReqID string    `json:"req"`
		At    time.Time `json:"at"`
	}
)

// Encode turns cmd into a log entry, wrapping key material with kek.
// It runs on the leader, outside the FSM (wrapping reads randomness).
func Encode(kek []byte, cmd Command) ([]byte, error) {
	switch c := cmd.(type) {
	case AcmeWrite:
		return encodeAcme(kek, c) // acme.go
	case ClusterSecret:
		return encodeSecret(c) // secret.go
	case SetConfig:
		return encodeConfig(c) // config.go
	}
	var typ byte
	var body any
	wrap := func(k keyring.Key) ([]byte, error) { return keyring.WrapKeys(kek, []keyring.Key{k}) }
	switch c := cmd.(type) {
	case InstallKey:
		w, err := wrap(c.Key)
		if err != nil {
			return nil, err
		}
		typ, body = TypeInstallKey, wireInstall{c.ReqID, w}
	case ActivateKey:
		typ, body = TypeActivateKey, wireActivate{c.ReqID, c.ID, c.At.Round(0).UTC()}
	case RevokeKey:
		b := wireRevoke{ReqID: c.ReqID, ID: c.ID}
		if c.Replacement != nil {
			w, err := wrap(*c.Replacement)
			if err != nil {
				return nil, err
			}
			b.Replacement = w
		}
		typ, body = TypeRevokeKey, b
	case PruneKeys:
		typ, body = TypePruneKeys, wirePrune{c.ReqID, c.Now.Round(0).UTC()}
	case SetDrain:
		typ, body = TypeSetDrain, wireDrain{c.ReqID, c.Cluster, c.Destination, c.Deadline.Round(0).UTC()}
	case ClearDrain:
		typ, body = TypeClearDrain, wireDrain{ReqID: c.ReqID, Cluster: c.Cluster, Destination: c.Destination}
	case SetClusterID:
		typ, body = TypeSetClusterID, wireClusterID{c.ReqID, c.ID}
	case SetClock:
		typ, body = TypeSetClock, wireClock{c.ReqID, c.At.Round(0).UTC()}
	default:
		return nil, fmt.Errorf("store: unknown command %T", cmd)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	spec := commandSpecs[typ]
	if spec.ignorable {
		typ |= FlagIgnorable
	}
	out, err := append([]byte{typ, spec.version}, b...), nil
	if err == nil {
		_, err = Decode(kek, out) // refuse to log what no node could apply
	}
	return out, err
}

// Decode parses a log entry whose key material is wrapped with kek.
func Decode(kek, b []byte) (Command, error) { return DecodeKEKs([][]byte{kek}, b) }

// DecodeKEKs parses a log entry, opening key material with the
// first of keks that opens it (while the cluster secret is rotated, entries
// are wrapped under the old or the new one). It reads no clock and no
// randomness (unwrapping is AES-GCM decryption), so the FSM may call it.
// Entries come from the log, but the decoder is written for untrusted
// input: it is fuzzed and never panics.
func DecodeKEKs(keks [][]byte, b []byte) (Command, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("command of %d bytes: too short", len(b))
	}
	typ, ver, body := b[0]&^FlagIgnorable, b[1], b[2:]
	if typ < TypeInstallKey || typ > TypeMax {
		return nil, fmt.Errorf("unknown command type %d", typ)
	}
	switch typ {
	case TypeAcmeWrite:
		return decodeAcme(keks, ver, body) // acme.go
	case TypeClusterSecret:
		return decodeSecret(ver, body) // secret.go
	case TypeSetConfig:
		return decodeConfig(ver, body) // config.go
	}
	if ver != commandSpecs[typ].version {
		return nil, fmt.Errorf("command type %d: body version %d, want %d", typ, ver, commandSpecs[typ].version)
	}
	unwrap := func(w []byte) (keyring.Key, error) {
		keys, err := keyring.UnwrapKeysAny(keks, w)
		if err != nil {
			return keyring.Key{}, err
		}
		if len(keys) != 1 {
			return keyring.Key{}, fmt.Errorf("wrapped key set holds %d keys, want 1", len(keys))
		}
		return keys[0], nil
	}
	var cmd Command
	var reqID string
	var err error
	switch typ {
	case TypeInstallKey:
		var w wireInstall
		if err = json.Unmarshal(body, &w); err == nil {
			var k keyring.Key
			if k, err = unwrap(w.Wrapped); err == nil {
				cmd, reqID = InstallKey{w.ReqID, k}, w.ReqID
			}
		}
	case TypeActivateKey:
		var w wireActivate
		if err = json.Unmarshal(body, &w); err == nil {
			if w.At.IsZero() {
				err = errors.New("activate: time is zero")
			}
			cmd, reqID = ActivateKey{w.ReqID, w.ID, w.At.UTC()}, w.ReqID
		}
	case TypeRevokeKey:
		var w wireRevoke
		if err = json.Unmarshal(body, &w); err == nil {
			c := RevokeKey{ReqID: w.ReqID, ID: w.ID}
			if w.Replacement != nil {
				var k keyring.Key
				if k, err = unwrap(w.Replacement); err == nil {
					c.Replacement = &k
				}
			}
			cmd, reqID = c, w.ReqID
		}
	case TypePruneKeys:
		var w wirePrune
		if err = json.Unmarshal(body, &w); err == nil {
			if w.Now.IsZero() {
				err = errors.New("prune: time is zero")
			}
			cmd, reqID = PruneKeys{w.ReqID, w.Now.UTC()}, w.ReqID
		}
	case TypeSetDrain, TypeClearDrain:
		var w wireDrain
		if err = json.Unmarshal(body, &w); err == nil {
			err = checkNames("cluster", w.Cluster, "destination", w.Destination)
			if typ == TypeSetDrain {
				if err == nil && w.Deadline.IsZero() {
					err = errors.New("drain: deadline is zero")
				}
				cmd = SetDrain{w.ReqID, w.Cluster, w.Destination, w.Deadline.UTC()}
			} else {
				if err == nil && !w.Deadline.IsZero() {
					err = errors.New("clear drain: unexpected deadline")
				}
				cmd = ClearDrain{w.ReqID, w.Cluster, w.Destination}
			}
			reqID = w.ReqID
		}
	case TypeSetClusterID:
		var w wireClusterID
		if err = json.Unmarshal(body, &w); err == nil {
			err = checkNames("cluster id", w.ID)
			cmd, reqID = SetClusterID{w.ReqID, w.ID}, w.ReqID
		}
	case TypeSetClock:
		var w wireClock
		if err = json.Unmarshal(body, &w); err == nil {
			if w.At.IsZero() {
				err = errors.New("set clock: time is zero")
			}
			cmd, reqID = SetClock{w.ReqID, w.At.UTC()}, w.ReqID
		}
	}
	if err == nil && (reqID == "" || len(reqID) > maxReqIDLen) {
		err = fmt.Errorf("request id of %d bytes, want 1-%d", len(reqID), maxReqIDLen)
	}
	if err != nil {
		return nil, fmt.Errorf("command type %d: %w", typ, err)
	}
	return cmd, nil
}

// checkNames takes (label, value) pairs and refuses empty or huge values.
func checkNames(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if v := pairs[i+1]; v == "" || len(v) > maxNameLen {
			return fmt.Errorf("%s of %d bytes, want 1-%d", pairs[i], len(v), maxNameLen)
		}
	}
	return nil
}

// ReqIDOf returns a command's request id.
func ReqIDOf(cmd Command) string {
	switch c := cmd.(type) {
	case InstallKey:
		return c.ReqID
	case ActivateKey:
		return c.ReqID
	case RevokeKey:
		return c.ReqID
	case PruneKeys:
		return c.ReqID
	case SetDrain:
		return c.ReqID
	case ClearDrain:
		return c.ReqID
	case SetClusterID:
		return c.ReqID
	case AcmeWrite:
		return c.ReqID
	case SetClock:
		return c.ReqID
	case ClusterSecret:
		return c.ReqID
	case SetConfig:
		return c.ReqID
	}
	return ""
}

// WithReqID returns cmd with its request id set to id.
func WithReqID(cmd Command, id string) Command {
	switch c := cmd.(type) {
	case InstallKey:
		c.ReqID = id
		return c
	case ActivateKey:
		c.ReqID = id
		return c
	case RevokeKey:
		c.ReqID = id
		return c
	case PruneKeys:
		c.ReqID = id
		return c
	case SetDrain:
		c.ReqID = id
		return c
	case ClearDrain:
		c.ReqID = id
		return c
	case SetClusterID:
		c.ReqID = id
		return c
	case AcmeWrite:
		c.ReqID = id
		return c
	case SetClock:
		c.ReqID = id
		return c
	case ClusterSecret:
		c.ReqID = id
		return c
	case SetConfig:
		c.ReqID = id
		return c
	}
	return cmd
}

// UnknownIn names the first command of set (with its version) that cmds
// does not apply ("" when it applies them all). Unlike CommandSet.version,
// an empty set here is no command at all.
func UnknownIn(set, cmds CommandSet) string {
	for i := 0; i < len(set); i++ {
		typ := byte(i + 1)
		v := CharVersion(set[i])
		if v == 0 {
			continue
		}
		if !cmds.Knows(typ, v) {
			name := fmt.Sprintf("type %d", typ)
			if cmds.Version(typ) > 0 {
				name = Name(typ)
			}
			return fmt.Sprintf("command %s v%d", name, v)
		}
	}
	return ""
}

// CharVersion is the body version a command set's character names (0:
// none, or not a version character).
func CharVersion(ch byte) byte {
	switch {
	case ch >= '1' && ch <= '9':
		return ch - '0'
	case ch >= 'a' && ch <= 'z':
		return ch - 'a' + 10
	}
	return 0
}

// ValidSet reports whether c is a command set: version characters or '0',
// at most one per possible type.
func ValidSet(c CommandSet) bool {
	if len(c) > 127 {
		return false
	}
	for i := 0; i < len(c); i++ {
		if c[i] != '0' && CharVersion(c[i]) == 0 {
			return false
		}
	}
	return true
}

// UnionSets is the set of every command either set holds, at the newer
// version of the two.
func UnionSets(a, b CommandSet) CommandSet {
	out := []byte(a)
	for i := 0; i < len(b); i++ {
		if i >= len(out) {
			out = append(out, '0')
		}
		if b[i] > out[i] {
			out[i] = b[i]
		}
	}
	return CommandSet(out)
}
