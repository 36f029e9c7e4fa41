package store

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/store/command"
)

// maxRequests is how many request ids the FSM remembers (oldest forgotten
// first). A retry comes within seconds; thousands of writes in between
// would take a long time at tether's write rates.
const maxRequests = 4096

// maxRemovals is how many removed members the FSM remembers.
const maxRemovals = 256

// fsm is the replicated state machine: the keyring (in the shared Ring),
// destination drains, the cluster id and the recent request ids. Apply
// reads no clock and no randomness and does no I/O; every node that
// applies the same entries reaches the same state.
//
// Writes happen on raft's FSM goroutine only; mu lets readers (dump,
// Drains) see a consistent state.
type fsm struct {
	ring     *keyring.Ring
	sec      *keyring.Secrets // this node's cluster secrets: key-encryption keys, kept in step with secretRecs
	logger   *slog.Logger
	commands CommandSet // what this FSM applies (an older set in tests)

	// stop is the index of the first entry this FSM cannot apply and may
	// not skip (0: none); it and every entry after it are not applied and
	// never counted, until a snapshot above it is restored or the binary
	// is upgraded. stopNeed says what that entry needs.
	stop     atomic.Uint64
	stopNeed atomic.Pointer[string]

	mu        sync.RWMutex
	clusterID string
	// clock is the committed cluster time: the latest ActivateKey.At or
	// PruneKeys.Now, or the time a SetClock set (the only way back). An
	// activation stamped earlier (a leader whose estimate of the cluster
	// time is a little behind the last one) is applied at clock, so keys
	// activate in the order they are committed. A prune goes by its own
	// time, never a later one: pruning early is the one harm, so a time
	// once committed ahead is not made sticky.
	clock    time.Time
	drains   map[drainKey]time.Time
	reqs     map[string]result
	reqOrder []string // application order, oldest first; len <= maxRequests
	// acme is the ACME state (acme.go); acmeVersion counts its changes.
	acme        map[string]AcmeEntry
	acmeVersion uint64
	// servers is the latest committed Raft configuration's member ids;
	// removed holds the ids a committed configuration dropped, with its
	// index, until they come back (removedOrder: oldest first, at most
	// maxRemovals). A removal retried on any node, after any change of
	// leader, answers with the change that was committed.
	servers      map[string]bool
	removed      map[string]uint64
	removedOrder []string
	// secretRecs are the cluster's secrets while it has changed its secret
	// (secrets.go; empty before the first change), secretsRemoved the ids
	// it removed with their index (oldest first).
	secretRecs     []secretRec
	secretsRemoved []wireRemoval
	// config is the cluster's config history (clusterconfig.go), oldest
	// first, at most maxConfigHistory; the last is the current version.
	config   []ConfigVersion
	applying uint64 // the index of the entry being applied
	// applied is the command set applied into the state (character i:
	// the newest body version of type i+1 applied, '0' none): snapshots
	// carry it, and a node that does not know one of them refuses them.
	applied []byte
	// refused is the index of the last snapshot Restore refused, so its
	// ERROR line is written once however often raft offers it.
	refused uint64

	index      atomic.Uint64 // last log index applied (or restored)
	lastChange atomic.Uint64 // index of the last entry that changed the state
	snapIndex  func() uint64 // newest snapshot's index: Restore's index when raft does not say which it restores

	onChange func() // after a state change: never blocks
	onApply  func() // after any entry: never blocks
	onStop   func() // once it stops at an entry it cannot apply: never blocks
}

type drainKey struct{ cluster, destination string }

// Drain is a destination that takes no new sessions; its existing sessions
// keep going to it until Deadline.
type Drain struct {
	Cluster, Destination string
	Deadline             time.Time
}

// result is what the first application of a request returned, kept so a
// retry returns the same.
type result struct {
	Code uint8  `json:"code"`
	Msg  string `json:"msg,omitempty"`
	// Value is what the first application committed (committedValue), so
	// a retry answers with it rather than with its own values.
	Value string `json:"value,omitempty"`
	// Bind is the request the id was first used for (BindRequest,
	// command.ContentBinding; "" from an entry or snapshot of an older version,
	// which binds nothing): the same id with another binding is refused.
	Bind string `json:"bind,omitempty"`
}

// result codes keep errors.Is working across retries and snapshots.
const (
	codeOK uint8 = iota
	codeUnknownKey
	codeKeyExists
	codeRevoked
	codeClusterID
	codeOther
	codeUnknownSecret
	codeSecretInUse
	codeTooManySecrets
	// codeSkipped: an ignorable command this node's version skipped
	// (rememberSkipped).
	codeSkipped
	codeConfigVersion
)

func resultOf(err error) result {
	switch {
	case err == nil:
		return result{}
	case errors.Is(err, keyring.ErrUnknownKey):
		return result{Code: codeUnknownKey, Msg: err.Error()}
	case errors.Is(err, keyring.ErrKeyExists):
		return result{Code: codeKeyExists, Msg: err.Error()}
	case errors.Is(err, keyring.ErrRevoked):
		return result{Code: codeRevoked, Msg: err.Error()}
	case errors.Is(err, ErrClusterID):
		return result{Code: codeClusterID, Msg: err.Error()}
	case errors.Is(err, ErrUnknownSecret):
		return result{Code: codeUnknownSecret, Msg: err.Error()}
	case errors.Is(err, ErrSecretInUse):
		return result{Code: codeSecretInUse, Msg: err.Error()}
	case errors.Is(err, ErrTooManySecrets):
		return result{Code: codeTooManySecrets, Msg: err.Error()}
	case errors.Is(err, ErrConfigVersion):
		return result{Code: codeConfigVersion, Msg: err.Error()}
	}
	return result{Code: codeOther, Msg: err.Error()}
}

// fsmError is an FSM result as an error: the first application's message,
// wrapping the sentinel of its code.
type fsmError struct {
	msg      string
	sentinel error
}

func (e *fsmError) Error() string { return e.msg }

func (e *fsmError) Unwrap() error { return e.sentinel }

func (r result) err() error {
	var s error
	switch r.Code {
	case codeOK:
		return nil
	case codeUnknownKey:
		s = keyring.ErrUnknownKey
	case codeKeyExists:
		s = keyring.ErrKeyExists
	case codeRevoked:
		s = keyring.ErrRevoked
	case codeClusterID:
		s = ErrClusterID
	case codeUnknownSecret:
		s = ErrUnknownSecret
	case codeSecretInUse:
		s = ErrSecretInUse
	case codeTooManySecrets:
		s = ErrTooManySecrets
	case codeSkipped:
		s = ErrUnsupported
	case codeConfigVersion:
		s = ErrConfigVersion
	}
	return &fsmError{r.Msg, s}
}

// applyResponse is what Apply returns to raft (future.Response()).
type applyResponse struct {
	err   error
	value string
}

func newFSM(ring *keyring.Ring, sec *keyring.Secrets, logger *slog.Logger) *fsm {
	return &fsm{
		ring: ring, sec: sec, logger: logger, commands: Commands,
		drains: map[drainKey]time.Time{}, reqs: map[string]result{}, servers: map[string]bool{}, removed: map[string]uint64{},
		snapIndex: func() uint64 { return 0 }, onChange: func() {}, onApply: func() {}, onStop: func() {},
	}
}

var (
	_ raft.FSM                = (*fsm)(nil)
	_ raft.ConfigurationStore = (*fsm)(nil)
)

// ErrStopped: this node met a log entry it cannot apply and may not skip
// (a command of a newer tether); it applies nothing more until upgraded.
var ErrStopped = errors.New("store: stopped applying: this node needs a newer tether")

// Apply applies one command entry. An entry of a type or body version this
// binary does not know is skipped only when marked ignorable; otherwise the
// FSM stops there (see fsm.stop) and logs once what it needs.
func (f *fsm) Apply(l *raft.Log) any {
	defer f.onApply()
	if f.stop.Load() != 0 {
		return applyResponse{err: f.stoppedErr()}
	}
	if len(l.Data) >= 2 {
		typ, ver := l.Data[0]&^command.FlagIgnorable, l.Data[1]
		if !f.commands.Knows(typ, ver) {
			if l.Data[0]&command.FlagIgnorable != 0 {
				what := fmt.Sprintf("%s v%d", command.Name(typ), ver)
				f.logger.Warn("raft entry skipped: its command is unknown to this version and marked ignorable",
					"index", l.Index, "command", what)
				f.mu.Lock()
				f.rememberSkipped(l.Index, what, l.Data[2:])
				f.raise(l.Index)
				f.mu.Unlock()
				return applyResponse{}
			}
			name := fmt.Sprintf("type %d", typ) // this binary may not know the name
			if f.commands.Version(typ) > 0 {
				name = command.Name(typ)
			}
			need := fmt.Sprintf("raft entry %d needs command %s v%d; this binary knows %s; stopped applying: upgrade tether on this node",
				l.Index, name, ver, f.commands.Describe())
			f.stopNeed.Store(&need)
			f.stop.Store(l.Index)
			f.logger.Error(need)
			f.onStop()
			return applyResponse{err: f.stoppedErr()}
		}
	}
	cmd, err := command.DecodeKEKs(f.sec.HeldKEKs(keyring.InfoRaft), l.Data)
	var env command.Envelope
	if err == nil {
		env, err = command.ReadEnvelope(l.Data[2:])
	}
	if err != nil { // a bug or a different cluster secret: loud, and no state change
		f.raise(l.Index)
		f.logger.Error("raft entry not applied: cannot decode it", "index", l.Index, "err", err)
		return applyResponse{err: fmt.Errorf("store: entry %d: %w", l.Index, err)}
	}
	// The applied index moves under f.mu with the state it describes
	// (Store.ReadState reads both at once).
	f.mu.Lock()
	id := command.ReqIDOf(cmd)
	if r, seen, err := f.checkRequest(id, env.Bind); seen {
		f.raise(l.Index)
		f.mu.Unlock()
		if err != nil {
			return applyResponse{err: err}
		}
		return applyResponse{r.err(), r.Value}
	}
	// A repeated or refused request changed nothing: its command joins the
	// set applied into the state only when it is applied.
	f.noteApplied(l.Data[0]&^command.FlagIgnorable, l.Data[1])
	f.applying = l.Index
	changed, err := f.apply(cmd)
	r := resultOf(err)
	if err == nil {
		r.Value = committedValue(cmd)
		if _, ok := cmd.(SetConfig); ok {
			r.Value = configValue(f.configVersion())
		}
	}
	r.Bind = env.Bind
	f.remember(id, r)
	f.raise(l.Index)
	f.mu.Unlock()
	if changed {
		f.lastChange.Store(l.Index)
		f.onChange()
	}
	return applyResponse{r.err(), r.Value}
}

// committedValue is the part of a command a client is answered with: the
// key an InstallKey installed, the replacement a RevokeKey installed, the
// deadline a SetDrain set.
func committedValue(cmd Command) string {
	switch c := cmd.(type) {
	case InstallKey:
		return c.Key.ID
	case RevokeKey:
		if c.Replacement != nil {
			return c.Replacement.ID
		}
	case SetDrain:
		return c.Deadline.Format(time.RFC3339Nano)
	}
	return ""
}

// stopped returns the index of the entry the FSM stopped at (0: none) and
// what it needs.
func (f *fsm) stopped() (uint64, string) {
	idx := f.stop.Load()
	if idx == 0 {
		return 0, ""
	}
	return idx, *f.stopNeed.Load()
}

func (f *fsm) stoppedErr() error {
	_, need := f.stopped()
	return fmt.Errorf("%w: %s", ErrStopped, need)
}

// apply changes the state; f.mu is held. It reports whether anything that
// readers see changed.
func (f *fsm) apply(cmd Command) (changed bool, err error) {
	switch c := cmd.(type) {
	case InstallKey:
		return true, f.ring.Install(c.Key)
	case ActivateKey:
		return true, f.ring.Activate(c.ID, f.commit(c.At))
	case RevokeKey:
		if c.Replacement != nil {
			return true, f.ring.RevokeAndInstall(c.ID, *c.Replacement)
		}
		return true, f.ring.Revoke(c.ID)
	case PruneKeys:
		f.commit(c.Now)
		return len(f.ring.Prune(c.Now)) > 0, nil
	case SetDrain:
		f.drains[drainKey{c.Cluster, c.Destination}] = c.Deadline
		return true, nil
	case ClearDrain:
		k := drainKey{c.Cluster, c.Destination}
		_, ok := f.drains[k]
		delete(f.drains, k)
		return ok, nil
	case SetClusterID:
		switch f.clusterID {
		case c.ID:
			return false, nil
		case "":
			f.clusterID = c.ID
			return true, nil
		}
		return false, fmt.Errorf("%w: this cluster is %q, refusing %q", ErrClusterID, f.clusterID, c.ID)
	case AcmeWrite:
		return f.applyAcme(c)
	case SetClock:
		changed := !c.At.Equal(f.clock)
		f.clock = c.At
		return changed, nil
	case ClusterSecret:
		changed, err := f.applySecret(c, f.applying)
		if changed {
			f.syncSecrets()
		}
		return changed, err
	case SetConfig:
		return f.applyConfig(c, f.applying)
	}
	return false, fmt.Errorf("store: command %T not handled", cmd)
}

// commit returns t, or the latest committed time when t is earlier, and
// records it; f.mu is held.
func (f *fsm) commit(t time.Time) time.Time {
	if t.Before(f.clock) {
		return f.clock
	}
	f.clock = t
	return t
}

// committed is the latest committed time (zero: none yet).
func (f *fsm) committed() time.Time {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.clock
}

// raise moves the applied index forward, never back.
func (f *fsm) raise(index uint64) {
	for {
		cur := f.index.Load()
		if index <= cur || f.index.CompareAndSwap(cur, index) {
			return
		}
	}
}

func (f *fsm) remember(id string, r result) {
	if len(f.reqOrder) >= maxRequests {
		delete(f.reqs, f.reqOrder[0])
		f.reqOrder = f.reqOrder[1:]
	}
	f.reqs[id] = r
	f.reqOrder = append(f.reqOrder, id)
}

// StoreConfiguration lets the FSM's index follow configuration entries too
// (WaitApplied on a membership change's index), and records which members
// each committed configuration removed.
func (f *fsm) StoreConfiguration(index uint64, c raft.Configuration) {
	if f.stop.Load() == 0 {
		f.mu.Lock()
		f.noteConfiguration(index, c)
		f.raise(index)
		f.mu.Unlock()
	}
	f.onApply()
}

// noteConfiguration records the members c has and the ones it dropped;
// f.mu is held. Ids are visited in sorted order, so every node remembers
// the same removals.
func (f *fsm) noteConfiguration(index uint64, c raft.Configuration) {
	cur := make(map[string]bool, len(c.Servers))
	for _, sv := range c.Servers {
		id := string(sv.ID)
		cur[id] = true
		if _, ok := f.removed[id]; ok { // back again
			delete(f.removed, id)
			f.removedOrder = slices.DeleteFunc(f.removedOrder, func(r string) bool { return r == id })
		}
	}
	gone := make([]string, 0, 1)
	for id := range f.servers {
		if !cur[id] {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	for _, id := range gone {
		if len(f.removedOrder) >= maxRemovals {
			delete(f.removed, f.removedOrder[0])
			f.removedOrder = f.removedOrder[1:]
		}
		f.removed[id] = index
		f.removedOrder = append(f.removedOrder, id)
	}
	f.servers = cur
}

// inConfiguration reports whether id is in the latest committed
// configuration this FSM applied.
func (f *fsm) inConfiguration(id string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.servers[id]
}

// removedAt is the index of the committed configuration that removed
// member id, if it is out and has not come back.
func (f *fsm) removedAt(id string) (uint64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	idx, ok := f.removed[id]
	return idx, ok
}

// Snapshot format: "tsn" | format version | JSON of snapshotBody. Key
// material is wrapped with the KEK (keyring.WrapKeys). Version 2 names the
// command set applied into the state (snapshotBody.Commands); version 1,
// written by releases before it, holds what legacySnapshotCommands names.
// Both decode strictly: a field this binary does not know is a snapshot of
// a newer tether, refused as a log entry of a newer command is.
var snapMagic = []byte{'t', 's', 'n', snapFormat}

const (
	snapFormat       byte = 2
	snapFormatLegacy byte = 1
)

// legacySnapshotCommands is what a version 1 snapshot may hold: the
// commands of the releases that wrote that version.
const legacySnapshotCommands CommandSet = "1111111111"

// ErrNewerSnapshot: a snapshot (or backup) this binary cannot fully
// understand: an unknown format version, a command it does not apply, a
// field it does not know.
var ErrNewerSnapshot = errors.New("store: snapshot of a newer tether")

type snapshotBody struct {
	// Commands is the command set applied into this state (CommandSet
	// form; absent in version 1).
	Commands  CommandSet              `json:"commands,omitempty"`
	ClusterID string                  `json:"cluster_id"`
	Clock     time.Time               `json:"clock,omitzero"`
	Keys      []byte                  `json:"keys"` // keyring.WrapKeys
	Drains    []wireSnapDrain         `json:"drains"`
	Requests  []wireRequest           `json:"requests"`
	Acme      []command.WireAcmeEntry `json:"acme,omitempty"` // secret values wrapped
	// Servers and Removed: the members the FSM last saw committed and
	// the ones committed configurations removed (absent in snapshots of
	// older versions, which then remember no removals).
	Servers []string      `json:"servers,omitempty"`
	Removed []wireRemoval `json:"removed,omitempty"`
	// Secrets and SecretsRemoved: the cluster's secrets once it changed
	// its secret (secrets.go), with the new ones wrapped.
	Secrets        []secretRec   `json:"secrets,omitempty"`
	SecretsRemoved []wireRemoval `json:"secrets_removed,omitempty"`
	// Config is the cluster's config history, oldest first (absent
	// before the first SetConfig).
	Config []wireConfigVersion `json:"config,omitempty"`
}

type wireRemoval struct {
	ID    string `json:"id"`
	Index uint64 `json:"index"`
}

type wireSnapDrain struct {
	Cluster     string    `json:"cluster"`
	Destination string    `json:"destination"`
	Deadline    time.Time `json:"deadline"`
}

type wireRequest struct {
	ID string `json:"id"`
	result
}

// fsmSnapshot is the state at one index; Persist wraps and writes it.
type fsmSnapshot struct {
	kek  []byte
	keys []keyring.Key
	acme []AcmeEntry
	body snapshotBody
}

// Snapshot runs on raft's FSM goroutine, so it sees a state between two
// entries; it only copies.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	// Raft labels a snapshot with its own applied index, which passed the
	// entry this FSM could not apply: such a snapshot (and the log
	// compaction after it) would lose that entry for good.
	if f.stop.Load() != 0 {
		return nil, f.stoppedErr()
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := &fsmSnapshot{kek: f.sec.KEK(keyring.InfoRaft), keys: f.ring.Snapshot(), acme: f.acmeList(), body: snapshotBody{
		ClusterID: f.clusterID, Clock: f.clock, Drains: f.drainList(), Requests: make([]wireRequest, 0, len(f.reqOrder)),
	}}
	for _, id := range f.reqOrder {
		s.body.Requests = append(s.body.Requests, wireRequest{id, f.reqs[id]})
	}
	s.body.Servers = f.serverList()
	for _, id := range f.removedOrder {
		s.body.Removed = append(s.body.Removed, wireRemoval{id, f.removed[id]})
	}
	s.body.Secrets = slices.Clone(f.secretRecs)
	s.body.SecretsRemoved = slices.Clone(f.secretsRemoved)
	s.body.Commands = CommandSet(f.applied)
	s.body.Config = f.configWire()
	return s, nil
}

// noteApplied adds command typ at body version ver to the set applied into
// the state; f.mu is held.
func (f *fsm) noteApplied(typ, ver byte) {
	if typ == 0 {
		return
	}
	for len(f.applied) < int(typ) {
		f.applied = append(f.applied, '0')
	}
	if ch := command.VersionChar(ver); ch > f.applied[typ-1] {
		f.applied[typ-1] = ch
	}
}

// unknownFieldError is a JSON object field the decoding type lacks.
type unknownFieldError struct{ msg string }

func (e *unknownFieldError) Error() string { return e.msg }

// decodeStrict decodes exactly one JSON value into v, refusing any object
// field v's type does not have (unknownFieldError) and anything after it.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if strings.HasPrefix(err.Error(), "json: unknown field ") {
			return &unknownFieldError{strings.TrimPrefix(err.Error(), "json: ")}
		}
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}

func (f *fsm) serverList() []string {
	out := make([]string, 0, len(f.servers))
	for id := range f.servers {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func (f *fsm) drainList() []wireSnapDrain {
	out := make([]wireSnapDrain, 0, len(f.drains))
	for k, d := range f.drains {
		out = append(out, wireSnapDrain{k.cluster, k.destination, d})
	}
	slices.SortFunc(out, func(a, b wireSnapDrain) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Destination, b.Destination))
	})
	return out
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	b, err := s.encode()
	if err == nil {
		_, err = sink.Write(b)
	}
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("store: writing snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) encode() ([]byte, error) {
	w, err := keyring.WrapKeys(s.kek, s.keys)
	if err != nil {
		return nil, err
	}
	body := s.body
	body.Keys = w
	if body.Acme, err = command.WrapAcme(s.kek, s.acme); err != nil {
		return nil, err
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return append(slices.Clone(snapMagic), b...), nil
}

func (s *fsmSnapshot) Release() {
	for _, k := range s.keys {
		clear(k.Material)
	}
}

// maxSnapshotSize bounds what Restore reads (the state is small: keys,
// drains, request ids).
const maxSnapshotSize = 64 << 20

// Restore replaces the whole state with a snapshot's. A snapshot this
// binary cannot fully understand (ErrNewerSnapshot, or a command it does
// not apply) is refused as a log entry of a newer command is: the FSM
// stops (if it had not), logs what it needs, hands leadership over, and
// raft is told the restore failed (raft then tries an older snapshot at
// start, and the leader sends it again later). Only a snapshot it
// understands at or past the entry it stopped at clears a stop.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	idx, ok := restoringIndex(rc)
	if !ok {
		idx = f.snapIndex()
	}
	b, err := io.ReadAll(io.LimitReader(rc, maxSnapshotSize+1))
	if err != nil {
		return fmt.Errorf("store: reading snapshot: %w", err)
	}
	st, err := decodeSnapshotWith(func(body *snapshotBody) [][]byte {
		learnFromSnapshot(f.sec, body)
		return f.sec.HeldKEKs(keyring.InfoRaft)
	}, b)
	if err == nil {
		if what := command.UnknownIn(st.body.Commands, f.commands); what != "" {
			st.Release()
			err = fmt.Errorf("%w: it holds %s", ErrNewerSnapshot, what)
		}
	}
	if errors.Is(err, ErrNewerSnapshot) {
		return f.refuseSnapshot(idx, err)
	}
	if err != nil {
		return err
	}
	// The keys and the applied index move under f.mu with the rest of the
	// state (Store.ReadState reads them at once).
	f.mu.Lock()
	if err := f.ring.Restore(st.keys); err != nil {
		f.mu.Unlock()
		return fmt.Errorf("store: snapshot keys: %w", err)
	}
	f.applied = []byte(st.body.Commands)
	f.clusterID = st.body.ClusterID
	f.clock = st.body.Clock
	f.drains = make(map[drainKey]time.Time, len(st.body.Drains))
	for _, d := range st.body.Drains {
		f.drains[drainKey{d.Cluster, d.Destination}] = d.Deadline
	}
	f.reqs = make(map[string]result, len(st.body.Requests))
	f.reqOrder = f.reqOrder[:0]
	for _, r := range st.body.Requests {
		f.reqs[r.ID] = r.result
		f.reqOrder = append(f.reqOrder, r.ID)
	}
	f.restoreAcme(st.acme)
	f.servers = make(map[string]bool, len(st.body.Servers))
	for _, id := range st.body.Servers {
		f.servers[id] = true
	}
	f.removed = make(map[string]uint64, len(st.body.Removed))
	f.removedOrder = f.removedOrder[:0]
	for _, r := range st.body.Removed {
		f.removed[r.ID] = r.Index
		f.removedOrder = append(f.removedOrder, r.ID)
	}
	f.secretRecs, f.secretsRemoved = st.body.Secrets, st.body.SecretsRemoved
	f.syncSecrets()
	f.restoreConfig(st.body.Config)
	f.raise(idx)
	f.mu.Unlock()
	if stop := f.stop.Load(); stop != 0 && idx >= stop {
		f.stop.Store(0) // the snapshot holds the state past that entry, and this binary understands all of it
		f.logger.Info("state restored from a snapshot past the entry this node could not apply; applying again", "index", idx)
	}
	f.lastChange.Store(max(f.lastChange.Load(), idx))
	f.onChange()
	f.onApply()
	return nil
}

// refuseSnapshot stops the FSM at a snapshot it cannot fully understand
// (at index idx) and returns the error raft gets. A stop already in place
// keeps its entry; the ERROR line is written once per snapshot.
func (f *fsm) refuseSnapshot(idx uint64, why error) error {
	what := strings.TrimPrefix(why.Error(), ErrNewerSnapshot.Error()+": ")
	need := fmt.Sprintf("raft snapshot %d cannot be restored: %s; this binary knows %s; stopped applying: upgrade tether on this node",
		idx, what, f.commands.Describe())
	stopNow := f.stop.Load() == 0
	if stopNow {
		f.stopNeed.Store(&need)
		f.stop.Store(max(idx, 1))
	}
	f.mu.Lock()
	first := f.refused != idx
	f.refused = idx
	f.mu.Unlock()
	if first {
		f.logger.Error(need)
	}
	if stopNow {
		f.onStop()
	}
	return fmt.Errorf("%w: %s", ErrStopped, need)
}

// restoringIndex is the index of the snapshot raft is restoring, when the
// reader it handed over came from this package's snapshot store.
func restoringIndex(rc io.ReadCloser) (uint64, bool) {
	for {
		if m, ok := rc.(*snapshotReader); ok {
			return m.index, true
		}
		w, ok := rc.(raft.ReadCloserWrapper)
		if !ok {
			return 0, false
		}
		rc = w.WrappedReadCloser()
	}
}

// decodeSnapshot decodes a snapshot whose key material is wrapped with kek.
func decodeSnapshot(kek, b []byte) (*fsmSnapshot, error) {
	return decodeSnapshotWith(func(*snapshotBody) [][]byte { return [][]byte{kek} }, b)
}

// decodeSnapshotWith decodes a snapshot, opening its key material with the
// first of the keys keks returns for its body (a node learns the secrets
// the body's records carry first).
func decodeSnapshotWith(keks func(*snapshotBody) [][]byte, b []byte) (*fsmSnapshot, error) {
	if len(b) > maxSnapshotSize {
		return nil, fmt.Errorf("store: snapshot larger than %d bytes", maxSnapshotSize)
	}
	if len(b) < len(snapMagic) || !bytes.HasPrefix(b, snapMagic[:3]) {
		return nil, fmt.Errorf("store: snapshot: unknown format (want %q version %d)", snapMagic[:3], snapFormat)
	}
	if v := b[3]; v != snapFormat && v != snapFormatLegacy {
		return nil, fmt.Errorf("%w: format version %d (this binary reads versions %d and %d)", ErrNewerSnapshot, v, snapFormatLegacy, snapFormat)
	}
	var body snapshotBody
	if err := decodeStrict(b[len(snapMagic):], &body); err != nil {
		var unknown *unknownFieldError
		if errors.As(err, &unknown) {
			return nil, fmt.Errorf("%w: %v", ErrNewerSnapshot, err)
		}
		return nil, fmt.Errorf("store: snapshot: %v", err)
	}
	switch {
	case b[3] == snapFormatLegacy:
		if body.Commands != "" {
			return nil, fmt.Errorf("%w: format version 1 names a command set", ErrNewerSnapshot)
		}
		body.Commands = legacySnapshotCommands
	case !command.ValidSet(body.Commands):
		return nil, fmt.Errorf("store: snapshot: command set %q is not a command set", body.Commands)
	}
	if len(body.Secrets) > keyring.MaxSecrets {
		return nil, fmt.Errorf("store: snapshot: %d cluster secrets, at most %d", len(body.Secrets), keyring.MaxSecrets)
	}
	for _, r := range body.Secrets {
		if !keyring.ValidSecretID(r.ID) || (r.State != keyring.SecretPrimary && r.State != keyring.SecretInstalled) {
			return nil, fmt.Errorf("store: snapshot: cluster secret record %q in state %q", r.ID, r.State)
		}
	}
	if len(body.SecretsRemoved) > maxSecretRemovals {
		body.SecretsRemoved = body.SecretsRemoved[len(body.SecretsRemoved)-maxSecretRemovals:]
	}
	kl := keks(&body)
	keys, err := keyring.UnwrapKeysAny(kl, body.Keys)
	if err != nil {
		return nil, fmt.Errorf("store: snapshot keys: %w", err)
	}
	if len(body.Requests) > maxRequests {
		body.Requests = body.Requests[len(body.Requests)-maxRequests:]
	}
	if len(body.Removed) > maxRemovals {
		body.Removed = body.Removed[len(body.Removed)-maxRemovals:]
	}
	if body.Config, err = checkConfigWire(body.Config); err != nil {
		return nil, err
	}
	acme, err := command.UnwrapAcme(kl, body.Acme)
	if err != nil {
		return nil, fmt.Errorf("store: snapshot acme state: %w", err)
	}
	return &fsmSnapshot{kek: kl[0], keys: keys, acme: acme, body: body}, nil
}

// ClusterID is the cluster's id, "" until SetClusterID is applied.
func (f *fsm) ClusterID() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.clusterID
}

// Drains lists the draining destinations sorted by cluster, destination.
func (f *fsm) Drains() []Drain {
	f.mu.RLock()
	l := f.drainList()
	f.mu.RUnlock()
	out := make([]Drain, len(l))
	for i, d := range l {
		out[i] = Drain{d.Cluster, d.Destination, d.Deadline}
	}
	return out
}

// dump is a deterministic description of the whole state (material as a
// hash), for tests that compare nodes.
func (f *fsm) dump() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var b bytes.Buffer
	fmt.Fprintf(&b, "cluster %q clock %s commands %q\n", f.clusterID, f.clock.Format(time.RFC3339Nano), f.applied)
	for _, k := range f.ring.Snapshot() {
		h := sha256.Sum256(k.Material)
		fmt.Fprintf(&b, "key %s created %s activates %s expires %s revoked %t material %s\n", k.ID,
			k.Created.Format(time.RFC3339Nano), k.Activates.Format(time.RFC3339Nano), k.Expires.Format(time.RFC3339Nano),
			k.Revoked, hex.EncodeToString(h[:8]))
	}
	for _, d := range f.drainList() {
		fmt.Fprintf(&b, "drain %s/%s until %s\n", d.Cluster, d.Destination, d.Deadline.Format(time.RFC3339Nano))
	}
	b.WriteString(f.acmeDump())
	for _, id := range f.reqOrder {
		fmt.Fprintf(&b, "req %s %d %s bind %s\n", id, f.reqs[id].Code, f.reqs[id].Msg, f.reqs[id].Bind)
	}
	fmt.Fprintf(&b, "servers %v\n", f.serverList())
	for _, id := range f.removedOrder {
		fmt.Fprintf(&b, "removed %s at %d\n", id, f.removed[id])
	}
	b.WriteString(f.secretDump())
	b.WriteString(f.configDump())
	return b.String()
}

// snapshotStore is the snapshot store raft is given: what it opens
// carries the snapshot's index (so Restore raises the applied index to the
// snapshot raft restores, not to the newest on disk), and a node that
// stopped applying stores no snapshot it is sent (it cannot restore one
// past the entry it stopped at, and storing it would push out the older
// ones it restarts from).
type snapshotStore struct {
	raft.SnapshotStore
	stopped func() bool
}

func (s snapshotStore) Create(v raft.SnapshotVersion, index, term uint64, c raft.Configuration, ci uint64, t raft.Transport) (raft.SnapshotSink, error) {
	if s.stopped() {
		return nil, fmt.Errorf("not storing snapshot %d: %w", index, ErrStopped)
	}
	return s.SnapshotStore.Create(v, index, term, c, ci, t)
}

func (s snapshotStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.SnapshotStore.Open(id)
	if err != nil {
		return nil, nil, err
	}
	return meta, &snapshotReader{rc, meta.Index}, nil
}

// snapshotReader is an opened snapshot with its index.
type snapshotReader struct {
	io.ReadCloser
	index uint64
}
