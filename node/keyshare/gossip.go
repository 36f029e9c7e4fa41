package keyshare

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"sync"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/store"
)

// Gossip is what the exchanges need of the membership.
type Gossip interface {
	Register(tag byte, h cluster.Handler) error
	Send(to string, tag byte, msg []byte, reliable bool) error
	Members() []cluster.Member
}

// Store is what the exchanges need of the replicated store.
type Store interface {
	IsLeader() bool
	Leader() (id, addr string)
	Term() uint64
	ClusterID() string
}

var (
	_ Gossip = (*cluster.Membership)(nil)
	_ Store  = (*store.Store)(nil)
)

// exchange is one gossip request/reply pair of tags, as the key transfer
// and the seed exchange use it: requests queue for one server goroutine
// (dropped when the queue is full: the asker times out and asks again),
// and a reply reaches the asker waiting under its nonce.
type exchange[Req, Rep any] struct {
	work  chan Req
	parse func([]byte) (Req, bool)
	nonce func(Rep) string

	mu      sync.Mutex
	waiting map[string]chan Rep
}

func newExchange[Req, Rep any](queue int, parse func([]byte) (Req, bool), nonce func(Rep) string) *exchange[Req, Rep] {
	return &exchange[Req, Rep]{work: make(chan Req, queue), parse: parse, nonce: nonce, waiting: map[string]chan Rep{}}
}

// register gives gossip the exchange's handlers.
func (e *exchange[Req, Rep]) register(g Gossip, requestTag, replyTag byte) error {
	if err := g.Register(requestTag, cluster.Handler{Msg: e.request}); err != nil {
		return err
	}
	return g.Register(replyTag, cluster.Handler{Msg: e.reply})
}

// request runs on memberlist's goroutine: it only queues.
func (e *exchange[Req, Rep]) request(msg []byte) {
	req, ok := e.parse(msg)
	if !ok {
		return
	}
	select {
	case e.work <- req:
	default:
	}
}

// reply runs on memberlist's goroutine: it hands the answer to its asker.
func (e *exchange[Req, Rep]) reply(msg []byte) {
	var rep Rep
	if json.Unmarshal(msg, &rep) != nil {
		return
	}
	e.mu.Lock()
	ch := e.waiting[e.nonce(rep)]
	e.mu.Unlock()
	if ch != nil {
		select {
		case ch <- rep:
		default:
		}
	}
}

// serve answers the queued requests until stop.
func (e *exchange[Req, Rep]) serve(stop <-chan struct{}, answer func(Req)) {
	for {
		select {
		case <-stop:
			return
		case req := <-e.work:
			answer(req)
		}
	}
}

// expect makes the reply under nonce reach the returned channel until
// done is called.
func (e *exchange[Req, Rep]) expect(nonce string) (replies <-chan Rep, done func()) {
	ch := make(chan Rep, 1)
	e.mu.Lock()
	e.waiting[nonce] = ch
	e.mu.Unlock()
	return ch, func() {
		e.mu.Lock()
		delete(e.waiting, nonce)
		e.mu.Unlock()
	}
}

// await waits for a reply or ctx.
func await[Rep any](ctx context.Context, replies <-chan Rep) (Rep, error) {
	select {
	case <-ctx.Done():
		var zero Rep
		return zero, ctx.Err()
	case rep := <-replies:
		return rep, nil
	}
}

// newNonce is a request's nonce in the key transfer.
func newNonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
