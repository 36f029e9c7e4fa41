package admin

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/proxy/upstream"
	"github.com/tether-proxy/tether/store"
)

// Store is what the endpoints read and write of the Raft store
// (*store.Store).
type Store interface {
	Leadership
	Term() uint64
	State() string
	CommitIndex() uint64
	DurableIndex() uint64
	ClusterID() string
	Drains() []store.Drain
	// Stopped is the index this node stopped applying at and what it
	// needs to go on (0: it applies).
	Stopped() (index uint64, need string)
	ReadState(fn func(index uint64, drains []store.Drain))
	CheckRequest(id, bind string) error
	CommitRequest(cmd store.Command, bind string) (store.Committed, error)
	RecordRequest(id, bind string) (store.Committed, error)
	CommittedRemoval(id string, timeout time.Duration) (uint64, bool, error)
	RemoveServer(id string) error
	SaveBackup(w io.Writer, now time.Time) (store.BackupInfo, error)
	// The cluster's config versions (the current one, the kept ones newest
	// first, one of them).
	ConfigCurrent() store.ConfigVersion
	ConfigHistory() []store.ConfigVersion
	ConfigAt(n uint64) (store.ConfigVersion, bool)
	RestoreBackup(r io.Reader, now time.Time, timeout time.Duration) (store.Restored, error)
}

// Proxy is the data path the endpoints show and drain (*proxy.Proxy).
type Proxy interface {
	ClusterIDs() []string
	Cluster(id string) *upstream.Cluster
	DrainTimeout(clusterID, destID string) (time.Duration, error)
}

// Node is what the endpoints need of the node itself: its readiness, its
// view of the members and keys, and the rules that decide what a write
// commits (the leader's, the cluster time's), which live there.
type Node interface {
	// NotReady says why the node does not serve yet ("" when it does).
	NotReady() string
	// Warnings are the store's warnings /readyz names.
	Warnings() []string
	// Members joins gossip membership with the Raft configuration.
	Members() []Member
	// ActiveKeyID is the key that encrypts at now ("" for none).
	ActiveKeyID(now time.Time) string
	// Keys lists the keyring as applied at index, with what each installed
	// key's activation waits for.
	Keys(now time.Time) (index uint64, active string, keys any)
	// Rotate installs a new key (on the leader).
	Rotate(reqID, bind string) (keyring.Metadata, uint64, error)
	// Revoke revokes key id (on the leader); keyring.ErrUnknownKey when
	// there is no such key.
	Revoke(ctx context.Context, id, reqID, bind string) (Revoked, error)
	// ClusterNow is the cluster time; an error (Writes.Unavailable) while
	// this node does not know it yet.
	ClusterNow() (time.Time, error)
	// ApplyDrains brings the data path in step with the replicated drains.
	ApplyDrains()
	// ConfirmApplied waits, at most within, until every other live member
	// applied index; it names those that did (this node first) and not.
	ConfirmApplied(ctx context.Context, index uint64, within time.Duration) (applied, pending []string)
	// Join joins gossip through addrs; a Conflict when it cannot.
	Join(addrs []string) (int, error)
	// Leave leaves the cluster; stop, called once the answer is out,
	// stops the node. A Conflict when the leave is refused.
	Leave(ctx context.Context, force bool, auth string) (stop func(), err error)
	// Probers, for a cluster with active health checks (nil without),
	// names the nodes that probe a destination and their latest verdicts.
	Probers(clusterID string) func(destID string) (probers []string, verdicts []ProberVerdict)
	// Acme is the status of the certificates the node obtains.
	Acme() any
}

// Revoked is what a revocation did.
type Revoked struct {
	Index       uint64   // where everything below is applied
	Active      string   // the key that encrypts after it
	Replacement string   // a key installed to take over (active, or pending)
	PassedOver  []string // failed members that do not hold active
}

// Conflict is a node error answered 409 with its own text.
type Conflict struct{ Err error }

func (c Conflict) Error() string { return c.Err.Error() }
func (c Conflict) Unwrap() error { return c.Err }

// Member is one row of GET /v1/members.
type Member struct {
	ID           string `json:"id"`
	Address      string `json:"address"`
	State        string `json:"state"`
	Raft         string `json:"raft"`
	RaftAddress  string `json:"raft_address,omitempty"`
	AdminAddress string `json:"admin_address,omitempty"`
	Version      string `json:"version,omitempty"`
	DurableIndex uint64 `json:"durable_index"`
	Leader       bool   `json:"leader"`
	Conflict     string `json:"conflict,omitempty"`          // its raft address is claimed by another node too
	Settings     string `json:"settings_mismatch,omitempty"` // its cluster flags differ from this node's
	// ConfigVersion is the version of the cluster's config it serves (0:
	// its own file's); ConfigError says why it could not apply a newer one.
	ConfigVersion uint64 `json:"config_version"`
	ConfigError   string `json:"config_error,omitempty"`
}

// SecretHandlers are the cluster secrets' endpoints, which the node
// serves itself.
type SecretHandlers struct {
	List, Install, Use, Remove http.HandlerFunc
}

// API is one node's admin API: the endpoints' handlers over the node's
// store, data path and rules, and the change watcher of GET /v1/events.
type API struct {
	NodeID  string
	Version string
	Started time.Time
	// Token and Names are the guards' (Config).
	Token []byte
	Names []string
	// ReadWait is how long a read waits for the index it asks for (0:
	// ReadWaitMax).
	ReadWait func() time.Duration
	// AdminAddr is the address other nodes reach this one's API at.
	AdminAddr func() string

	Store  Store
	Proxy  Proxy
	Node   Node
	Config ClusterConfig
	Writes *Writes
	// Ring is read by the change watcher.
	Ring interface {
		List(now time.Time) []keyring.Metadata
	}
	// Registry holds the metrics /metrics serves and traffic figures are
	// read from.
	Registry *prometheus.Registry
	Secrets  SecretHandlers
	Log      *slog.Logger

	// Bus carries the events; Wake wakes the change watcher; Stop ends
	// the event streams.
	Bus  *Bus
	Wake <-chan struct{}
	Stop <-chan struct{}

	traffic trafficRates
}

// Handler is the admin API behind its guards.
func (a *API) Handler() http.Handler {
	cfg := Config{Token: a.Token, Names: a.Names, AtIndex: AtIndex(a.Store, a.readWait), OnLeader: a.Writes.OnLeader}
	return Handler(cfg, Handlers{
		Ready:           a.ready,
		Metrics:         promhttp.HandlerFor(a.Registry, promhttp.HandlerOpts{}),
		Status:          a.status,
		Members:         a.members,
		Events:          a.events,
		Join:            a.join,
		Leave:           a.leave,
		Remove:          a.remove,
		KeyringList:     a.keyringList,
		KeyringRotate:   a.keyringRotate,
		KeyringRevoke:   a.keyringRevoke,
		SecretsList:     a.Secrets.List,
		SecretInstall:   a.Secrets.Install,
		SecretUse:       a.Secrets.Use,
		SecretRemove:    a.Secrets.Remove,
		SnapshotSave:    a.snapshotSave,
		SnapshotRestore: a.snapshotRestore,
		Clusters:        a.clusters,
		Destinations:    a.destinations,
		Drain:           a.drain(true),
		Undrain:         a.drain(false),
		ConfigGet:       a.configGet,
		ConfigPush:      a.configPush,
		ConfigHistory:   a.configHistory,
		ConfigVersion:   a.configVersion,
		ConfigRollback:  a.configRollback,
	})
}

func (a *API) readWait() time.Duration {
	if a.ReadWait == nil {
		return 0
	}
	return a.ReadWait()
}
