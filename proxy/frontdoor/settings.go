package frontdoor

import (
	"fmt"
	goruntime "runtime"
	"strings"

	"github.com/tether-proxy/tether/proxy/internal/sockio"
)

// Settings of the front door that are not part of the configuration file:
// they are the agent's flags (docs/OPERATIONS.md).

// WriteYield says whether a socket write first lets the other runnable
// requests go ahead to their own writes (writeYield, docs/OPERATIONS.md).
type WriteYield string

const (
	// WriteYieldAuto: on when the process runs on one P (GOMAXPROCS 1 at
	// start), where it was measured; off otherwise. The default.
	WriteYieldAuto WriteYield = "auto"
	WriteYieldOn   WriteYield = "on"
	WriteYieldOff  WriteYield = "off"
)

// ParseWriteYield reads a --write-yield value; "" is auto.
func ParseWriteYield(s string) (WriteYield, error) {
	switch v := WriteYield(strings.ToLower(strings.TrimSpace(s))); v {
	case "":
		return WriteYieldAuto, nil
	case WriteYieldAuto, WriteYieldOn, WriteYieldOff:
		return v, nil
	}
	return "", fmt.Errorf("write yield %q is not auto, on or off", s)
}

// SetWriteYield applies v to every socket write of the process from now
// on (it is a property of the process's scheduling, not of a listener).
func SetWriteYield(v WriteYield) error {
	if _, err := ParseWriteYield(string(v)); err != nil {
		return err
	}
	sockio.SetWriteYield(yieldSetting(v, goruntime.GOMAXPROCS(0)))
	return nil
}

func yieldSetting(v WriteYield, procs int) bool {
	switch v {
	case WriteYieldOn:
		return true
	case WriteYieldOff:
		return false
	}
	return procs == 1
}

// HTTP1Server names what serves cleartext HTTP/1.1 connections
// (docs/OPERATIONS.md, "The HTTP/1.1 server").
type HTTP1Server string

const (
	// HTTP1Own is tether's own HTTP/1.1 loop (package h1server), which hands a
	// connection to net/http at the first request it does not take. The
	// default.
	HTTP1Own HTTP1Server = "own"
	// HTTP1Stdlib serves every connection with net/http's server.
	HTTP1Stdlib HTTP1Server = "stdlib"
)

// ParseHTTP1Server reads an --http1-server value; "" is the default.
func ParseHTTP1Server(s string) (HTTP1Server, error) {
	switch v := HTTP1Server(strings.ToLower(strings.TrimSpace(s))); v {
	case "":
		return HTTP1Own, nil
	case HTTP1Own, HTTP1Stdlib:
		return v, nil
	}
	return "", fmt.Errorf("http1 server %q is not own or stdlib", s)
}

// HTTP2Server names what serves HTTP/2 connections, h2 over TLS and h2c
// (docs/OPERATIONS.md, "The HTTP/2 server").
type HTTP2Server string

const (
	// HTTP2Own is tether's own HTTP/2 server (package h2server). The
	// default.
	HTTP2Own HTTP2Server = "own"
	// HTTP2Stdlib is net/http's HTTP/2 server.
	HTTP2Stdlib HTTP2Server = "stdlib"
)

// defaultHTTP2 serves HTTP/2 when no option says otherwise (a test run may
// change it: h2mode_test.go).
var defaultHTTP2 = HTTP2Own

// ParseHTTP2Server reads an --http2-server value; "" is the default.
func ParseHTTP2Server(s string) (HTTP2Server, error) {
	switch v := HTTP2Server(strings.ToLower(strings.TrimSpace(s))); v {
	case "":
		return HTTP2Own, nil
	case HTTP2Own, HTTP2Stdlib:
		return v, nil
	}
	return "", fmt.Errorf("http2 server %q is not own or stdlib", s)
}

// Option tunes a Server beyond its configuration file.
type Option func(*options)

type options struct {
	http1 HTTP1Server
	http2 HTTP2Server
}

// WithHTTP2Server chooses what serves HTTP/2 (default HTTP2Own).
func WithHTTP2Server(v HTTP2Server) Option {
	return func(o *options) { o.http2 = v }
}

// WithHTTP1Server chooses what serves cleartext HTTP/1.1 (default
// HTTP1Own).
func WithHTTP1Server(v HTTP1Server) Option {
	return func(o *options) { o.http1 = v }
}
