//go:build !linux

package proxy

import "testing"

// blackholeAddr needs Linux's behaviour of a full listen backlog (SYNs
// dropped, not refused).
func blackholeAddr(t *testing.T) string {
	t.Skip("a silent address needs Linux (a full listen backlog drops SYNs)")
	return ""
}
