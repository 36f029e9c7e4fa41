package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	adminapi "github.com/tether-proxy/tether/node/admin"
	"github.com/tether-proxy/tether/node/leader"
	"github.com/tether-proxy/tether/store"
)

// Headers of a write forwarded from a follower to the leader.
const (
	// hdrForwardedBy names the follower; a node that receives a forwarded
	// write and does not lead refuses it (one hop, never a loop).
	hdrForwardedBy = "X-Tether-Forwarded-By"
	// hdrRequestID carries the write's request id, so a retry after a lost
	// leadership is applied once (the FSM remembers request ids).
	hdrRequestID = "X-Tether-Request-Id"
	// hdrNotLeader marks the answer of a node that got a forwarded write
	// but no longer leads.
	hdrNotLeader = "X-Tether-Not-Leader"
	// hdrIndex carries the Raft index at which everything a write's answer
	// names is applied, so the follower that forwarded it answers only once
	// it applied that index itself: a read on it right after shows the
	// write. Reads answer with the applied index they reflect, and a read
	// that sends it waits for it (atIndex).
	hdrIndex = "X-Tether-Index"
)

// setCommitted marks a write's answer with the index at which what it
// names is applied.
func setCommitted(w http.ResponseWriter, index uint64) {
	if index > 0 {
		w.Header().Set(hdrIndex, strconv.FormatUint(index, 10))
	}
}

// forwardTimeout bounds one forwarded write, waiting for a leader included.
const forwardTimeout = 15 * time.Second

// requestID is the write's request id: the client's (or the forwarding
// follower's) when it sent one, else a new one, fixed on the request so a
// retry inside this node reuses it.
func requestID(r *http.Request) string {
	id := r.Header.Get(hdrRequestID)
	if id == "" || len(id) > 128 {
		id = newID()
		r.Header.Set(hdrRequestID, id)
	}
	return id
}

// bindKey is the request context's key of the write's binding.
type bindKey struct{}

// requestBinding is the binding of the write's request id to the request
// (store.BindRequest of its method, path and body) that onLeader computed.
func requestBinding(r *http.Request) string {
	b, _ := r.Context().Value(bindKey{}).(string)
	return b
}

// withRequestBinding sets the binding a handler's writes carry.
func withRequestBinding(r *http.Request, bind string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), bindKey{}, bind))
}

// onLeader runs a write on the leader: here when this node leads, else
// forwarded in one hop to the leader's admin address from gossip. When the
// leader is lost in the middle, the write is retried with the same request
// id once a leader is known again.
func (n *Node) onLeader(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		requestID(r)
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			adminapi.WriteError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
			return
		}
		// The request id is bound to the request: the same id with another
		// method, path or body is refused (store.ErrRequestReused). The
		// leader binds what it receives, a forwarded request as its client
		// sent it.
		r = withRequestBinding(r, store.BindRequest(r.Method, r.URL.Path, body))
		ctx, cancel := context.WithTimeout(r.Context(), forwardTimeout)
		defer cancel()
		for attempt := 0; attempt < 2; attempt++ {
			r.Body = io.NopCloser(bytes.NewReader(body))
			switch {
			case n.store.IsLeader():
				rec := &retryRecorder{ResponseWriter: w}
				h(rec, r)
				if rec.lostLeadership && attempt == 0 && n.waitLeader(ctx) == nil {
					continue
				}
				rec.flush()
				return
			case r.Header.Get(hdrForwardedBy) != "":
				// The forwarding follower looks the leader up again and
				// retries with the same request id (one hop per attempt).
				w.Header().Set(hdrNotLeader, "1")
				adminapi.WriteError(w, http.StatusServiceUnavailable, "this node no longer leads the cluster (leadership moved while the write was forwarded): retry")
				return
			default:
				if id, _ := n.store.Leader(); id != "" {
					n.forward(w, r, id, body)
					return
				}
				if attempt == 0 && n.waitLeader(ctx) == nil {
					continue
				}
				adminapi.WriteError(w, http.StatusServiceUnavailable, n.noLeaderError())
				return
			}
		}
	}
}

// waitLeader waits briefly for a leader to be known.
func (n *Node) waitLeader(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return n.store.WaitForLeader(ctx)
}

// forward sends the write to the leader and copies its answer back. A
// leader that cannot be reached (it restarted on a new address, or just
// lost leadership) is looked up again until the forward timeout.
func (n *Node) forward(w http.ResponseWriter, r *http.Request, leaderID string, body []byte) {
	ctx, cancel := context.WithTimeout(r.Context(), forwardTimeout)
	defer cancel()
	var lastErr error
	for {
		addr := n.leaderAdmin(leaderID)
		if addr != "" {
			resp, err := n.forwardOnce(ctx, r, addr, body)
			if err == nil && resp.Header.Get(hdrNotLeader) != "" {
				resp.Body.Close()
				err = fmt.Errorf("%s no longer leads", leaderID)
			}
			if err == nil {
				defer resp.Body.Close()
				if err := n.catchUp(ctx, resp); err != nil {
					adminapi.WriteError(w, http.StatusGatewayTimeout, err.Error())
					return
				}
				w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
				w.Header().Set("X-Tether-Leader", leaderID)
				if v := resp.Header.Get(hdrIndex); v != "" {
					w.Header().Set(hdrIndex, v)
				}
				w.WriteHeader(resp.StatusCode)
				_, _ = io.Copy(w, io.LimitReader(resp.Body, 16<<20))
				return
			}
			lastErr = fmt.Errorf("forwarding the write to the leader %s at %s failed: %w", leaderID, addr, err)
		} else {
			lastErr = fmt.Errorf("the leader %s has not gossiped its admin address yet: retry, or send the write to it", leaderID)
		}
		select {
		case <-ctx.Done():
			adminapi.WriteError(w, http.StatusBadGateway, lastErr.Error())
			return
		case <-time.After(200 * time.Millisecond):
		}
		if id, _ := n.store.Leader(); id != "" {
			leaderID = id
		}
		if n.store.IsLeader() {
			adminapi.WriteError(w, http.StatusServiceUnavailable, "leadership moved to this node while forwarding: retry")
			return
		}
	}
}

// catchUp waits until this node applied the entry of the leader's
// successful answer, and brings the data path in step with it (drains are
// otherwise applied by watchStore, a moment later).
func (n *Node) catchUp(ctx context.Context, resp *http.Response) error {
	if resp.StatusCode/100 != 2 {
		return nil
	}
	index, err := strconv.ParseUint(resp.Header.Get(hdrIndex), 10, 64)
	if err != nil || index == 0 {
		return nil
	}
	if err := n.store.WaitApplied(ctx, index); err != nil {
		return fmt.Errorf("the leader committed the write (index %d) but this node has not applied it yet (applied %d): reads here lag; retry with the same %s to get its result: %w",
			index, n.store.AppliedIndex(), hdrRequestID, err)
	}
	n.applyDrains()
	return nil
}

// leaderAdmin is the leader's admin address from gossip.
func (n *Node) leaderAdmin(id string) string {
	if n.members == nil {
		return ""
	}
	for _, m := range n.members.Members() {
		if m.ID == id && m.State == "alive" {
			return m.AdminAddr
		}
	}
	return ""
}

func (n *Node) forwardOnce(ctx context.Context, r *http.Request, addr string, body []byte) (*http.Response, error) {
	u := url.URL{Scheme: "http", Host: addr, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for _, h := range []string{"Authorization", "Content-Type", hdrRequestID} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	req.Header.Set(hdrForwardedBy, n.cfg.NodeID)
	return forwardClient.Do(req)
}

var forwardClient = &http.Client{Timeout: forwardTimeout}

// noLeaderError names the Raft servers this node cannot reach.
func (n *Node) noLeaderError() string {
	var unreachable []string
	alive := map[string]bool{}
	if n.members != nil {
		for _, m := range n.members.Members() {
			alive[m.ID] = m.State == "alive"
		}
	}
	if servers, err := n.store.Servers(); err == nil {
		for _, s := range servers {
			if s.ID != n.cfg.NodeID && !alive[s.ID] {
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

// writeApplyError answers a failed replicated write.
func (n *Node) writeApplyError(w http.ResponseWriter, what string, err error) {
	switch {
	case errors.Is(err, store.ErrLeadershipLost):
		if rw, ok := w.(*retryRecorder); ok {
			rw.lostLeadership = true
		}
		adminapi.WriteError(w, http.StatusServiceUnavailable, what+": leadership was lost during the write (it may have been applied): retry")
	case errors.Is(err, leader.ErrBehind), errors.As(err, new(*leader.KeysNotHeldError)):
		adminapi.WriteError(w, http.StatusServiceUnavailable, what+": "+err.Error())
	case errors.Is(err, store.ErrNotLeader):
		adminapi.WriteError(w, http.StatusServiceUnavailable, what+": "+n.noLeaderError())
	case errors.Is(err, store.ErrUnsupported): // a rolling upgrade under way
		adminapi.WriteError(w, http.StatusConflict, what+": "+err.Error())
	case errors.Is(err, store.ErrRequestReused):
		adminapi.WriteError(w, http.StatusConflict, what+": "+err.Error())
	case errors.Is(err, store.ErrNoClusterID):
		adminapi.WriteError(w, http.StatusServiceUnavailable, what+": "+err.Error()+": retry")
	default:
		n.log.Error(what+" failed", "error", err)
		adminapi.WriteError(w, http.StatusInternalServerError, what+" failed: "+err.Error())
	}
}

// retryRecorder holds a leader-side answer so onLeader can retry a write
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
