package proxy

import (
	"fmt"
	"github.com/tether-proxy/tether/proxy/internal/sockio"
	goruntime "runtime"
	"strings"
)

// Process settings of the data path that are not part of the
// configuration file: they are the agent's flags (docs/OPERATIONS.md).

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
