package admin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/store"
)

// Headers of a write forwarded from a follower to the leader, and of the
// indexes reads and writes answer with.
const (
	// HeaderForwardedBy names the follower; a node that receives a
	// forwarded write and does not lead refuses it (one hop, never a loop).
	HeaderForwardedBy = "X-Tether-Forwarded-By"
	// HeaderRequestID carries the write's request id, so a retry after a
	// lost leadership is applied once (the FSM remembers request ids).
	HeaderRequestID = "X-Tether-Request-Id"
	// HeaderNotLeader marks the answer of a node that got a forwarded
	// write but no longer leads.
	HeaderNotLeader = "X-Tether-Not-Leader"
	// HeaderIndex carries the Raft index at which everything a write's
	// answer names is applied, so the follower that forwarded it answers
	// only once it applied that index itself: a read on it right after
	// shows the write. Reads answer with the applied index they reflect,
	// and a read that sends it waits for it (AtIndex).
	HeaderIndex = "X-Tether-Index"
)

// SetCommitted marks a write's answer with the index at which what it
// names is applied.
func SetCommitted(w http.ResponseWriter, index uint64) {
	if index > 0 {
		w.Header().Set(HeaderIndex, strconv.FormatUint(index, 10))
	}
}

// SetIndex marks a read's answer with the applied index it reflects.
func SetIndex(w http.ResponseWriter, index uint64) {
	w.Header().Set(HeaderIndex, strconv.FormatUint(index, 10))
}

// ForwardTimeout bounds one forwarded write, waiting for a leader included.
const ForwardTimeout = 15 * time.Second

// ForwardClient sends forwarded writes (and the node's own calls to the
// leader's admin API).
var ForwardClient = &http.Client{Timeout: ForwardTimeout}

// RequestID is the write's request id: the client's (or the forwarding
// follower's) when it sent one, else a new one, fixed on the request so a
// retry inside this node reuses it.
func RequestID(r *http.Request) string {
	id := r.Header.Get(HeaderRequestID)
	if id == "" || len(id) > 128 {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		id = hex.EncodeToString(b)
		r.Header.Set(HeaderRequestID, id)
	}
	return id
}

// bindKey is the request context's key of the write's binding.
type bindKey struct{}

// RequestBinding is the binding of the write's request id to the request
// (store.BindRequest of its method, path and body) that OnLeader computed.
func RequestBinding(r *http.Request) string {
	b, _ := r.Context().Value(bindKey{}).(string)
	return b
}

// withRequestBinding sets the binding a handler's writes carry.
func withRequestBinding(r *http.Request, bind string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), bindKey{}, bind))
}

// Leadership is what the write path reads of the Raft store
// (*store.Store).
type Leadership interface {
	IsLeader() bool
	Leader() (id, addr string)
	WaitForLeader(ctx context.Context) error
	WaitApplied(ctx context.Context, index uint64) error
	AppliedIndex() uint64
	Servers() ([]store.Server, error)
}

// Gossip is the membership the write path finds the leader's admin
// address in (*cluster.Membership).
type Gossip interface {
	Members() []cluster.Member
}

// Writes runs writes on the leader and answers their failures.
type Writes struct {
	// NodeID is this node's id (X-Tether-Forwarded-By).
	NodeID string
	Store  Leadership
	// Gossip is nil on a node without gossip.
	Gossip Gossip
	// Applied brings the data path in step once a forwarded write's entry
	// is applied here (drains are otherwise applied a moment later).
	Applied func()
	// Unavailable reports node errors a write answers with 503 and the
	// error's own text (a leader not caught up, keys members lack).
	Unavailable func(error) bool
	Log         *slog.Logger
}

// OnLeader runs a write on the leader: here when this node leads, else
// forwarded in one hop to the leader's admin address from gossip. When the
// leader is lost in the middle, the write is retried with the same request
// id once a leader is known again.
func (f *Writes) OnLeader(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		RequestID(r)
		body, err := io.ReadAll(io.LimitReader(r.Body, maxConfigBody+1))
		if err != nil {
			WriteError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
			return
		}
		if len(body) > maxConfigBody { // a pushed config is the largest write
			WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", maxConfigBody))
			return
		}
		// The request id is bound to the request: the same id with another
		// method, path or body is refused (store.ErrRequestReused). The
		// leader binds what it receives, a forwarded request as its client
		// sent it.
		r = withRequestBinding(r, store.BindRequest(r.Method, r.URL.Path, body))
		ctx, cancel := context.WithTimeout(r.Context(), ForwardTimeout)
		defer cancel()
		for attempt := 0; attempt < 2; attempt++ {
			r.Body = io.NopCloser(bytes.NewReader(body))
			switch {
			case f.Store.IsLeader():
				rec := &retryRecorder{ResponseWriter: w}
				h(rec, r)
				if rec.lostLeadership && attempt == 0 && f.waitLeader(ctx) == nil {
					continue
				}
				rec.flush()
				return
			case r.Header.Get(HeaderForwardedBy) != "":
				// The forwarding follower looks the leader up again and
				// retries with the same request id (one hop per attempt).
				w.Header().Set(HeaderNotLeader, "1")
				WriteError(w, http.StatusServiceUnavailable, "this node no longer leads the cluster (leadership moved while the write was forwarded): retry")
				return
			default:
				if id, _ := f.Store.Leader(); id != "" {
					if !f.forward(w, r, id, body) {
						return
					}
					// Leadership moved here while the write was being
					// forwarded: it runs here, with the same request id
					// (a copy the old leader committed answers as it did).
					if attempt == 0 {
						continue
					}
					WriteError(w, http.StatusServiceUnavailable, "leadership moved to this node while forwarding: retry")
					return
				}
				if attempt == 0 && f.waitLeader(ctx) == nil {
					continue
				}
				WriteError(w, http.StatusServiceUnavailable, f.NoLeaderError())
				return
			}
		}
	}
}

// waitLeader waits briefly for a leader to be known.
func (f *Writes) waitLeader(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return f.Store.WaitForLeader(ctx)
}

// forward sends the write to the leader and copies its answer back. A
// leader that cannot be reached (it restarted on a new address, or just
// lost leadership) is looked up again until the forward timeout. It
// returns true, having written nothing, when this node became the leader
// meanwhile: the caller runs the write itself.
func (f *Writes) forward(w http.ResponseWriter, r *http.Request, leaderID string, body []byte) bool {
	ctx, cancel := context.WithTimeout(r.Context(), ForwardTimeout)
	defer cancel()
	var lastErr error
	for {
		addr := f.LeaderAdmin(leaderID)
		if addr != "" {
			resp, err := f.forwardOnce(ctx, r, addr, body)
			if err == nil && resp.Header.Get(HeaderNotLeader) != "" {
				resp.Body.Close()
				err = fmt.Errorf("%s no longer leads", leaderID)
			}
			if err == nil {
				defer resp.Body.Close()
				if err := f.catchUp(ctx, resp); err != nil {
					WriteError(w, http.StatusGatewayTimeout, err.Error())
					return false
				}
				w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
				w.Header().Set("X-Tether-Leader", leaderID)
				for _, h := range []string{HeaderIndex, "ETag"} {
					if v := resp.Header.Get(h); v != "" {
						w.Header().Set(h, v)
					}
				}
				w.WriteHeader(resp.StatusCode)
				_, _ = io.Copy(w, io.LimitReader(resp.Body, 16<<20))
				return false
			}
			lastErr = fmt.Errorf("forwarding the write to the leader %s at %s failed: %w", leaderID, addr, err)
		} else {
			lastErr = fmt.Errorf("the leader %s has not gossiped its admin address yet: retry, or send the write to it", leaderID)
		}
		select {
		case <-ctx.Done():
			WriteError(w, http.StatusBadGateway, lastErr.Error())
			return false
		case <-time.After(200 * time.Millisecond):
		}
		if id, _ := f.Store.Leader(); id != "" {
			leaderID = id
		}
		if f.Store.IsLeader() {
			return true
		}
	}
}

// catchUp waits until this node applied the entry of the leader's
// successful answer, and brings the data path in step with it.
func (f *Writes) catchUp(ctx context.Context, resp *http.Response) error {
	if resp.StatusCode/100 != 2 {
		return nil
	}
	index, err := strconv.ParseUint(resp.Header.Get(HeaderIndex), 10, 64)
	if err != nil || index == 0 {
		return nil
	}
	if err := f.Store.WaitApplied(ctx, index); err != nil {
		return fmt.Errorf("the leader committed the write (index %d) but this node has not applied it yet (applied %d): reads here lag; retry with the same %s to get its result: %w",
			index, f.Store.AppliedIndex(), HeaderRequestID, err)
	}
	if f.Applied != nil {
		f.Applied()
	}
	return nil
}

// LeaderAdmin is the leader's admin address from gossip ("" when gossip
// does not see it alive).
func (f *Writes) LeaderAdmin(id string) string {
	if f.Gossip == nil {
		return ""
	}
	for _, m := range f.Gossip.Members() {
		if m.ID == id && m.State == "alive" {
			return m.AdminAddr
		}
	}
	return ""
}

func (f *Writes) forwardOnce(ctx context.Context, r *http.Request, addr string, body []byte) (*http.Response, error) {
	u := url.URL{Scheme: "http", Host: addr, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for _, h := range []string{"Authorization", "Content-Type", "If-Match", HeaderRequestID} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	req.Header.Set(HeaderForwardedBy, f.NodeID)
	return ForwardClient.Do(req)
}

// NoLeaderError names the Raft servers this node cannot reach.
func (f *Writes) NoLeaderError() string {
	var unreachable []string
	alive := map[string]bool{}
	if f.Gossip != nil {
		for _, m := range f.Gossip.Members() {
			alive[m.ID] = m.State == "alive"
		}
	}
	if servers, err := f.Store.Servers(); err == nil {
		for _, s := range servers {
			if s.ID != f.NodeID && !alive[s.ID] {
				unreachable = append(unreachable, fmt.Sprintf("%s (%s)", s.ID, s.Address))
			}
		}
	}
	msg := "no Raft leader: writes need a majority of the voters"
	if len(unreachable) > 0 {
		msg += "; unreachable: " + strings.Join(unreachable, ", ")
	}
	return msg
}

// WriteApplyError answers a failed replicated write.
func (f *Writes) WriteApplyError(w http.ResponseWriter, what string, err error) {
	switch {
	case errors.Is(err, store.ErrLeadershipLost):
		if rw, ok := w.(*retryRecorder); ok {
			rw.lostLeadership = true
		}
		WriteError(w, http.StatusServiceUnavailable, what+": leadership was lost during the write (it may have been applied): retry")
	case f.Unavailable != nil && f.Unavailable(err):
		WriteError(w, http.StatusServiceUnavailable, what+": "+err.Error())
	case errors.Is(err, store.ErrNotLeader):
		WriteError(w, http.StatusServiceUnavailable, what+": "+f.NoLeaderError())
	case errors.Is(err, store.ErrUnsupported): // a rolling upgrade under way
		WriteError(w, http.StatusConflict, what+": "+err.Error())
	case errors.Is(err, store.ErrRequestReused):
		WriteError(w, http.StatusConflict, what+": "+err.Error())
	case errors.Is(err, store.ErrNoClusterID):
		WriteError(w, http.StatusServiceUnavailable, what+": "+err.Error()+": retry")
	default:
		f.Log.Error(what+" failed", "error", err)
		WriteError(w, http.StatusInternalServerError, what+" failed: "+err.Error())
	}
}

// retryRecorder holds a leader-side answer so OnLeader can retry a write
// whose leadership was lost, instead of sending that answer.
type retryRecorder struct {
	http.ResponseWriter
	lostLeadership bool
	status         int
	header         http.Header
	body           bytes.Buffer
}

func (r *retryRecorder) Header() http.Header {
	if r.header == nil {
		r.header = http.Header{}
	}
	return r.header
}
func (r *retryRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}
func (r *retryRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
func (r *retryRecorder) flush() {
	for k, v := range r.header {
		r.ResponseWriter.Header()[k] = v
	}
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.ResponseWriter.WriteHeader(r.status)
	_, _ = r.ResponseWriter.Write(r.body.Bytes())
}
