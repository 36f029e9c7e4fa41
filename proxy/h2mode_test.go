package proxy

import (
	"fmt"
	"os"

	"github.com/tether-proxy/tether/proxy/frontdoor"
)

// testHTTP2 serves HTTP/2 wherever a test does not choose (newFrontDoor).
var testHTTP2 = frontdoor.HTTP2Own

// TETHER_TEST_HTTP2_SERVER=stdlib runs the package's tests with net/http's
// HTTP/2 server wherever a test does not choose one (the own server, the
// default, otherwise): every HTTP/2 test, not only the parity suite's
// modes.
func init() {
	v := os.Getenv("TETHER_TEST_HTTP2_SERVER")
	if v == "" {
		return
	}
	h2, err := frontdoor.ParseHTTP2Server(v)
	if err != nil {
		panic(fmt.Sprintf("TETHER_TEST_HTTP2_SERVER: %v", err))
	}
	testHTTP2 = h2
}
