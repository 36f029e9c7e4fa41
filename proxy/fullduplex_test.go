package proxy

import (
	"bufio"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// TestUnfinishedUploadClosesTheConnection: a response that starts before
// the client finished its HTTP/1 upload closes the connection once the
// upload ends. Kept alive, net/http would read the rest of the body after
// the handler returned and panic reading the next request
// (golang/go#68560, full-duplex mode).
func TestUnfinishedUploadClosesTheConnection(t *testing.T) {
	early := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		// Answers before reading the body (with Connection: close, net/http
		// does not wait to swallow the rest first).
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusUnauthorized)
	})
	reading := newBackend(t, nil)
	for _, c := range []struct {
		desc, backend string
		want          int
		partial       bool
		wantClose     bool
	}{
		{"a backend that answers before the upload ends", early.URL, http.StatusUnauthorized, true, true},
		{"a backend that cannot be reached (the body is never read)", "http://" + deadAddr(t), http.StatusBadGateway, true, true},
		{"a finished upload keeps the connection alive", reading.URL, http.StatusOK, false, false},
	} {
		t.Run(c.desc, func(t *testing.T) {
			h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": c.backend}, "", "", "")), nil)
			var logBuf testutil.SyncBuffer
			front := httptest.NewUnstartedServer(h.p)
			front.Config.ErrorLog = log.New(&logBuf, "", 0)
			front.Start()
			defer front.Close()

			conn, err := net.Dial("tcp", front.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			first := "0123456789"
			if c.partial {
				first = "01234"
			}
			if _, err := io.WriteString(conn, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n"+first); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want || resp.Close != c.wantClose {
				t.Fatalf("status %d close %v, want %d close %v", resp.StatusCode, resp.Close, c.want, c.wantClose)
			}
			if c.partial {
				_, _ = io.WriteString(conn, "56789")
			}
			// The next request on the connection: answered, or the
			// connection ends (it was announced); never a panic.
			_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
			resp2, err := http.ReadResponse(br, nil)
			if c.wantClose {
				if err == nil {
					resp2.Body.Close()
					t.Fatalf("a request after Connection: close was answered: %d", resp2.StatusCode)
				}
			} else if err != nil {
				t.Fatalf("second request on a kept-alive connection: %v", err)
			} else {
				resp2.Body.Close()
			}
			// Closing our end first: Close waits for every connection, and
			// would wait forever on one a stuck handler still holds.
			conn.Close()
			front.Close() // waits for the connection's goroutine, so its log is complete
			if s := logBuf.String(); strings.Contains(s, "panic") {
				t.Fatalf("net/http panicked:\n%s", s)
			}
		})
	}
}
