//go:build !linux

package h1server

// Without epoll a parked connection waits on a goroutine of its own
// (parkWait).

func (c *h1Conn) parkPoll() bool { return false }

func (c *h1Conn) unparkOutside() bool { return false }

func (c *h1Conn) parkExpired() {}
