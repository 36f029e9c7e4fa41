package keyshare

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

type testReply struct {
	Nonce string `json:"n"`
	V     int    `json:"v"`
}

// The request/reply helper: a full queue drops requests (the asker asks
// again), a malformed request takes no place in it, and a reply reaches
// only the asker waiting under its nonce, until that asker is done.
func TestExchangeQueuesRequestsAndRoutesRepliesByNonce(t *testing.T) {
	e := newExchange(2, func(b []byte) (string, bool) { return string(b), len(b) > 0 },
		func(r testReply) string { return r.Nonce })
	for _, m := range []string{"", "a", "b", "c"} {
		e.request([]byte(m))
	}
	var got []string
	stop := make(chan struct{})
	e.serve(stop, func(req string) {
		got = append(got, req)
		if len(e.work) == 0 {
			close(stop)
		}
	})
	if len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("served %q, want [a b] (empty refused, c dropped on a full queue)", got)
	}

	replies, done := e.expect("n1")
	reply := func(nonce string, v int) {
		b, _ := json.Marshal(testReply{Nonce: nonce, V: v})
		e.reply(b)
	}
	reply("other", 1)
	e.reply([]byte("not json"))
	reply("n1", 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if rep, err := await(ctx, replies); err != nil || rep.V != 2 {
		t.Fatalf("await: %+v, %v; want the reply under n1", rep, err)
	}
	done()
	reply("n1", 3)
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if rep, err := await(ctx, replies); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a reply after done reached the asker: %+v, %v", rep, err)
	}
}
