package keyring

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// KeySize is the length of key material: AES-256.
const KeySize = 32

// MaxIDLen bounds key ids so that they fit the one-byte length prefix of the
// wire format and stay short in cookies.
const MaxIDLen = 64

// State is where a key is in its life cycle at a given time.
type State int

const (
	// Installed: known everywhere, decrypts, but not yet activated.
	Installed State = iota
	// Active: activated and not expired; the newest active key encrypts.
	Active
	// Expired: past its expiry; decrypts until expiry + retention.
	Expired
	// Revoked: neither encrypts nor decrypts.
	Revoked
	// Inactive: activated and not expired, but superseded by a newer active
	// key: it decrypts and no longer encrypts. Only a Ring knows which key
	// encrypts, so only [Ring.List] reports it; [Key.State] says Active.
	Inactive
)

func (s State) String() string {
	switch s {
	case Installed:
		return "installed"
	case Active:
		return "active"
	case Expired:
		return "expired"
	case Revoked:
		return "revoked"
	case Inactive:
		return "inactive"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// MarshalText makes State encode as its name in JSON.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses a state name (for API clients).
func (s *State) UnmarshalText(b []byte) error {
	for _, c := range []State{Installed, Active, Inactive, Expired, Revoked} {
		if string(b) == c.String() {
			*s = c
			return nil
		}
	}
	return fmt.Errorf("keyring: unknown key state %q", b)
}

// Key is one encryption key. Material is secret: the formatting, JSON and
// slog methods of Key never show it.
type Key struct {
	ID        string
	Created   time.Time
	Activates time.Time
	Expires   time.Time
	Revoked   bool
	Material  []byte // KeySize bytes
}

// State reports k's state at now, on its own: a key superseded by a newer
// one is still Active here ([Ring.List] reports it Inactive).
func (k Key) State(now time.Time) State {
	switch {
	case k.Revoked:
		return Revoked
	case !now.Before(k.Expires):
		return Expired
	case now.Before(k.Activates):
		return Installed
	}
	return Active
}

// Metadata is everything about a key but its material, for API output.
type Metadata struct {
	ID        string    `json:"id"`
	Created   time.Time `json:"created"`
	Activates time.Time `json:"activates"`
	Expires   time.Time `json:"expires"`
	State     State     `json:"state"`
}

// Metadata describes k at now.
func (k Key) Metadata(now time.Time) Metadata {
	return Metadata{ID: k.ID, Created: k.Created, Activates: k.Activates, Expires: k.Expires, State: k.State(now)}
}

// String describes k without its material.
func (k Key) String() string {
	s := fmt.Sprintf("key %s (created %s, activates %s, expires %s",
		k.ID, k.Created.Format(time.RFC3339), k.Activates.Format(time.RFC3339), k.Expires.Format(time.RFC3339))
	if k.Revoked {
		s += ", revoked"
	}
	return s + ")"
}

// GoString is used by %#v; material is redacted.
func (k Key) GoString() string {
	return fmt.Sprintf("keyring.Key{ID:%q, Created:%q, Activates:%q, Expires:%q, Revoked:%t, Material:<redacted>}",
		k.ID, k.Created.Format(time.RFC3339Nano), k.Activates.Format(time.RFC3339Nano), k.Expires.Format(time.RFC3339Nano), k.Revoked)
}

// Format makes every fmt verb (%v, %+v, %#v, %s, %x, ...) print the redacted
// description, never the material.
func (k Key) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprint(f, k.GoString())
		return
	}
	fmt.Fprint(f, k.String())
}

// LogValue makes slog log the key's metadata only.
func (k Key) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("id", k.ID),
		slog.Time("created", k.Created),
		slog.Time("activates", k.Activates),
		slog.Time("expires", k.Expires),
		slog.Bool("revoked", k.Revoked),
	)
}

// MarshalJSON encodes the metadata only, so a Key handed to an encoder by
// mistake does not leak its material. Use WrapKeys to persist keys.
func (k Key) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		ID        string    `json:"id"`
		Created   time.Time `json:"created"`
		Activates time.Time `json:"activates"`
		Expires   time.Time `json:"expires"`
		Revoked   bool      `json:"revoked"`
	}{k.ID, k.Created, k.Activates, k.Expires, k.Revoked})
}

// GenerateKey makes a new key: random id and material, created at now,
// activating after activationDelay (so that it can be installed on every
// node before any node encrypts with it), expiring lifetime after that.
// It is the only function of the package that reads randomness; it is not
// for use inside a Raft FSM.
func GenerateKey(now time.Time, activationDelay, lifetime time.Duration) (Key, error) {
	if activationDelay < 0 {
		return Key{}, fmt.Errorf("keyring: activation delay %s is negative", activationDelay)
	}
	if lifetime <= 0 {
		return Key{}, fmt.Errorf("keyring: key lifetime %s must be positive", lifetime)
	}
	if now.IsZero() {
		return Key{}, errors.New("keyring: GenerateKey needs the current time, got zero")
	}
	var id [8]byte
	material := make([]byte, KeySize)
	// crypto/rand.Read never fails since Go 1.24 (it crashes the program
	// instead of returning weak randomness).
	_, _ = rand.Read(id[:])
	_, _ = rand.Read(material)
	now = canonicalTime(now)
	activates := now.Add(activationDelay)
	return Key{
		ID:        hex.EncodeToString(id[:]),
		Created:   now,
		Activates: activates,
		Expires:   activates.Add(lifetime),
		Material:  material,
	}, nil
}

// canonicalTime drops the monotonic reading and location so that times
// compare and serialize the same on every node.
func canonicalTime(t time.Time) time.Time { return t.Round(0).UTC() }

// validID reports whether id is usable: 1..MaxIDLen bytes of [0-9A-Za-z._-],
// safe in URLs (/v1/keyring/{id}/revoke), logs and file names.
func validID(id string) bool {
	if len(id) == 0 || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// validate checks k's fields; errors name the field, never the material.
func (k Key) validate() error {
	if !validID(k.ID) {
		return fmt.Errorf("keyring: key id %q: must be 1-%d characters of [0-9A-Za-z._-]", k.ID, MaxIDLen)
	}
	if len(k.Material) != KeySize {
		return fmt.Errorf("keyring: key %s: material is %d bytes, want %d", k.ID, len(k.Material), KeySize)
	}
	if k.Created.IsZero() || k.Activates.IsZero() || k.Expires.IsZero() {
		return fmt.Errorf("keyring: key %s: created, activates and expires are required", k.ID)
	}
	if !k.Expires.After(k.Activates) {
		return fmt.Errorf("keyring: key %s: expires %s is not after activates %s",
			k.ID, k.Expires.Format(time.RFC3339), k.Activates.Format(time.RFC3339))
	}
	return nil
}

// clone returns k with canonical times and its own copy of the material.
func (k Key) clone() Key {
	k.Created = canonicalTime(k.Created)
	k.Activates = canonicalTime(k.Activates)
	k.Expires = canonicalTime(k.Expires)
	k.Material = append([]byte(nil), k.Material...)
	return k
}

// same reports whether a and b are the same key (idempotent install).
func same(a, b Key) bool {
	return a.ID == b.ID && a.Created.Equal(b.Created) && a.Activates.Equal(b.Activates) &&
		a.Expires.Equal(b.Expires) && a.Revoked == b.Revoked &&
		subtle.ConstantTimeCompare(a.Material, b.Material) == 1
}
