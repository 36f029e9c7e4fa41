package testutil

import (
	"bufio"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// RawClient sends keep-alive GETs on one connection and reads their
// responses (a head, then a 1 KiB body) without an allocation per request,
// so that allocation and CPU tests measure the server alone.
type RawClient struct {
	C    net.Conn
	br   *bufio.Reader
	tail [1024]byte
}

// NewRawClient reads from c through an 8 KiB buffer.
func NewRawClient(c net.Conn) *RawClient {
	return &RawClient{C: c, br: bufio.NewReaderSize(c, 8<<10)}
}

// Get sends req and reads its response; line, when not nil, sees each
// line of the head.
func (rc *RawClient) Get(tb testing.TB, req []byte, line func([]byte)) {
	if _, err := rc.C.Write(req); err != nil {
		tb.Fatal(err)
	}
	for {
		l, err := rc.br.ReadSlice('\n')
		if err != nil {
			tb.Fatal(err)
		}
		if len(l) == 2 {
			break
		}
		if line != nil {
			line(l)
		}
	}
	if _, err := io.ReadFull(rc.br, rc.tail[:]); err != nil {
		tb.Fatal(err)
	}
}

// UserCPU is the process's user CPU time so far (0 where getrusage fails).
func UserCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano())
}
