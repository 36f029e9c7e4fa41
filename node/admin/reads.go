package admin

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ReadWaitMax bounds how long a read waits for this node to apply the
// index it asks for.
const ReadWaitMax = 10 * time.Second

// Applied is what a read waits on (*store.Store).
type Applied interface {
	WaitApplied(ctx context.Context, index uint64) error
	AppliedIndex() uint64
}

// AtIndex runs a read once this node has applied the index the client asks
// for: the X-Tether-Index of an earlier answer, sent back as the request
// header X-Tether-Index or as ?index=N (the larger when both). So a client
// reads its own writes, and never goes back in time, on any node. A node
// that does not reach it within wait() (0: ReadWaitMax), or the request's
// own end, answers 503 with its applied index. Every read answer carries
// X-Tether-Index: the applied index it reflects.
func AtIndex(s Applied, wait func() time.Duration) func(http.HandlerFunc) http.HandlerFunc {
	return func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var want uint64
			for _, v := range []string{r.Header.Get(HeaderIndex), r.URL.Query().Get("index")} {
				if v == "" {
					continue
				}
				i, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				if err != nil {
					WriteError(w, http.StatusBadRequest, fmt.Sprintf("index %q: want a Raft index (a non-negative integer, as X-Tether-Index answers)", v))
					return
				}
				want = max(want, i)
			}
			if want > 0 {
				wait := cmp.Or(wait(), ReadWaitMax)
				ctx, cancel := context.WithTimeout(r.Context(), wait)
				err := s.WaitApplied(ctx, want)
				cancel()
				if err != nil {
					applied := s.AppliedIndex()
					SetIndex(w, applied)
					w.Header().Set("Retry-After", "1")
					WriteJSON(w, http.StatusServiceUnavailable, map[string]any{
						"error":         fmt.Sprintf("this node has applied up to index %d, not index %d asked for (waited up to %s): read from another node, or retry: %v", applied, want, wait, err),
						"applied_index": applied,
						"index":         want,
					})
					return
				}
			}
			h(w, r)
		}
	}
}
