package uitest

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/tether-proxy/tether/test/testutil"
)

// tetherBin is the binary TestMain builds once, with -race, from the
// product module (the repository root), as `make build` would.
var tetherBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// It builds tether, runs a cluster of processes and drives a browser.
		fmt.Println("uitest: skipped under -short")
		os.Exit(0)
	}
	bin, dir, err := testutil.BuildTether("../..", "-race")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tetherBin = bin
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// catchAll routes every path to the cluster "app".
const catchAll = `"all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } }`
