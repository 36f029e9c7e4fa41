package frontdoor

import (
	"fmt"
	"os"
)

// TETHER_TEST_HTTP2_SERVER=stdlib runs the package's tests with net/http's
// HTTP/2 server wherever a test does not choose one (own, the default,
// otherwise): every HTTP/2 test, not only the parity suite's modes.
func init() {
	v := os.Getenv("TETHER_TEST_HTTP2_SERVER")
	if v == "" {
		return
	}
	h2, err := ParseHTTP2Server(v)
	if err != nil {
		panic(fmt.Sprintf("TETHER_TEST_HTTP2_SERVER: %v", err))
	}
	defaultHTTP2 = h2
}
