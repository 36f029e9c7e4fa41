package chaos

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

var (
	seedFlag     = flag.Uint64("chaos.seed", 0, "seed of the nemesis and the clients (0: TETHER_CHAOS_SEED, else from the clock; printed)")
	durationFlag = flag.Duration("chaos.duration", 0, "how long faults and clients run (0: TETHER_CHAOS_DURATION, else 25s)")
)

// netnsEnv marks the test process re-run inside its own network namespace.
const netnsEnv = "TETHER_CHAOS_NETNS"

// partitions says whether iptables partitions are possible here, and why not.
var partitions struct {
	on  bool
	why string
}

func TestMain(m *testing.M) {
	flag.Parse()
	switch {
	case os.Getenv(netnsEnv) == "1":
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			partitions.why = fmt.Sprintf("ip link set lo up: %v %s", err, out)
		} else if err := iptables("-N", chain); err != nil {
			partitions.why = err.Error()
		} else if err := iptables("-A", "OUTPUT", "-j", chain); err != nil {
			partitions.why = err.Error()
		} else {
			partitions.on = true
		}
	case os.Geteuid() != 0:
		partitions.why = "not root: no private network namespace for iptables"
	default:
		if err := exec.Command("unshare", "-n", "iptables", "-S").Run(); err != nil {
			partitions.why = fmt.Sprintf("unshare -n iptables: %v", err)
			break
		}
		// Run again inside a private network namespace: the iptables
		// rules then touch nothing outside this test.
		cmd := exec.Command("unshare", append([]string{"-n", "--", os.Args[0]}, os.Args[1:]...)...)
		cmd.Env = append(os.Environ(), netnsEnv+"=1")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			os.Exit(0)
		case errors.As(err, &ee):
			os.Exit(ee.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "chaos: unshare:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// settings returns the seed and duration of this run.
func settings() (seed uint64, d time.Duration) {
	seed = *seedFlag
	if seed == 0 {
		seed, _ = strconv.ParseUint(os.Getenv("TETHER_CHAOS_SEED"), 10, 64)
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano() % 1_000_000)
	}
	d = *durationFlag
	if d == 0 {
		d, _ = time.ParseDuration(os.Getenv("TETHER_CHAOS_DURATION"))
	}
	if d <= 0 {
		d = 25 * time.Second
	}
	return seed, d
}

// chain is the iptables chain the partitions fill.
const chain = "TETHER_CHAOS"

func iptables(args ...string) error {
	if out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("iptables %v: %v %s", args, err, out)
	}
	return nil
}
