package h1server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/textproto"
	"reflect"
	"regexp"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/tether-proxy/tether/proxy/internal/h1wire"
	"github.com/tether-proxy/tether/proxy/internal/monotime"
	"github.com/tether-proxy/tether/test/testutil"
)

// The own HTTP/1.1 loop is held to net/http's server: the same raw bytes
// sent to a plain http.Server and to an Server in front of the same
// handler must give the handler the same request and the client the same
// response bytes (less the Date value). net/http is the known answer.

// seenRequest is what a handler saw of its request.
type seenRequest struct {
	Method, URL, Path, RawPath, RawQuery, Proto, Host, RequestURI, RemoteHost string
	Header                                                                    http.Header
	Close                                                                     bool
	ContentLength                                                             int64
	NoBody, HasServer, HasLocalAddr                                           bool
	Body                                                                      string
}

func see(r *http.Request) seenRequest {
	body, _ := io.ReadAll(r.Body)
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	_, srv := r.Context().Value(http.ServerContextKey).(*http.Server)
	_, la := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return seenRequest{Method: r.Method, URL: r.URL.String(), Path: r.URL.Path, RawPath: r.URL.RawPath,
		RawQuery: r.URL.RawQuery, Proto: r.Proto, Host: r.Host, RequestURI: r.RequestURI, RemoteHost: host,
		Header: r.Header.Clone(), Close: r.Close, ContentLength: r.ContentLength, NoBody: r.Body == http.NoBody,
		HasServer: srv, HasLocalAddr: la, Body: string(body)}
}

// pair runs h behind net/http's server and behind Server.
type pair struct {
	std, own string // addresses
	ownSrv   *Server
	logs     *testutil.SyncBuffer
}

func newPair(t testing.TB, h http.Handler, tune func(*http.Server)) *pair {
	t.Helper()
	p := &pair{logs: &testutil.SyncBuffer{}}
	mk := func() *http.Server {
		srv := &http.Server{Handler: h, ErrorLog: log.New(p.logs, "", 0), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 10 * time.Second}
		if tune != nil {
			tune(srv)
		}
		return srv
	}
	lnStd, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	std := mk()
	go func() { _ = std.Serve(lnStd) }()
	lnOwn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	own := mk()
	p.ownSrv = New(own)
	go func() { _ = own.Serve(p.ownSrv.handoff) }()
	go func() { _ = p.ownSrv.Serve(lnOwn) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = std.Shutdown(ctx)
		_ = own.Shutdown(ctx)
		_ = p.ownSrv.Shutdown(ctx)
	})
	p.std, p.own = lnStd.Addr().String(), lnOwn.Addr().String()
	return p
}

func okHandler(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }

// exchange sends raw on a new connection to addr and reads until the
// server closes or goes quiet for quiet; closed says which.
func exchange(t *testing.T, addr, raw string, quiet time.Duration) (string, bool) {
	t.Helper()
	out, closed, err := exchangeRaw(addr, raw, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return out, closed
}

func exchangeRaw(addr, raw string, quiet time.Duration) (string, bool, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", false, err
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		return "", false, err
	}
	var out bytes.Buffer
	buf := make([]byte, 64<<10)
	for {
		_ = c.SetReadDeadline(time.Now().Add(quiet))
		n, err := c.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			var ne net.Error
			return out.String(), !(errors.As(err, &ne) && ne.Timeout()), nil
		}
	}
}

var dateLine = regexp.MustCompile(`(?m)^Date: [^\r]*\r$`)

func noDate(s string) string { return dateLine.ReplaceAllString(s, "Date: -\r") }

// seenLog records the requests a handler saw, in order.
type seenLog struct {
	mu   sync.Mutex
	reqs []seenRequest
}

func (l *seenLog) add(r *http.Request) {
	s := see(r)
	l.mu.Lock()
	l.reqs = append(l.reqs, s)
	l.mu.Unlock()
}

func (l *seenLog) take() []seenRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.reqs
	l.reqs = nil
	return r
}

// TestH1ServerMatchesNetHTTP sends each raw exchange to both servers and
// requires the same requests at the handler, the same response bytes and
// the same connection fate. own says whether the own loop takes the first
// request (false: it hands the connection to net/http).
func TestH1ServerMatchesNetHTTP(t *testing.T) {
	handlers := map[string]http.HandlerFunc{
		"plain": func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") },
		"empty": func(w http.ResponseWriter, r *http.Request) {},
		"status": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-A", "1")
			w.WriteHeader(http.StatusTeapot)
		},
		"unknown status": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(599) },
		"length": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "5")
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "12345")
		},
		"length no type": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "14")
			io.WriteString(w, "<html></html>\n")
		},
		"encoding no type": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			io.WriteString(w, "<html></html>")
		},
		"short length": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "10")
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "12345")
		},
		"long write": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "3")
			w.Header().Set("Content-Type", "text/plain")
			_, err := io.WriteString(w, "12345")
			w.Header().Set("X-Err", fmt.Sprint(err)) // too late for the head
		},
		"bad length": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "x")
			io.WriteString(w, "abc")
		},
		"big": func(w http.ResponseWriter, r *http.Request) {
			for i := 0; i < 10; i++ {
				io.WriteString(w, strings.Repeat(fmt.Sprint(i), 700))
			}
		},
		"one big write": func(w http.ResponseWriter, r *http.Request) {
			w.Write(bytes.Repeat([]byte("z"), 5000))
		},
		"exactly 2048": func(w http.ResponseWriter, r *http.Request) {
			w.Write(bytes.Repeat([]byte("y"), 2048))
		},
		"flushes": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := 0; i < 3; i++ {
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
			}
		},
		"flush first": func(w http.ResponseWriter, r *http.Request) {
			w.(http.Flusher).Flush()
			io.WriteString(w, "after")
		},
		"controller flush": func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "a")
			if err := http.NewResponseController(w).Flush(); err != nil {
				panic(err)
			}
			io.WriteString(w, "b")
		},
		"trailers": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Sum, X-Other")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "body")
			w.Header().Set("X-Sum", "42")
			w.Header().Set("X-Unannounced", "no")
		},
		"prefixed trailers": func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "body")
			w.Header().Set(http.TrailerPrefix+"X-Late", "1")
		},
		"trailers with length": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Sum")
			w.Header().Set("Content-Length", "4")
			io.WriteString(w, "body")
			w.Header().Set("X-Sum", "1")
		},
		"1xx": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			io.WriteString(w, "final")
		},
		"204 with body": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "3")
			w.WriteHeader(http.StatusNoContent)
			_, err := io.WriteString(w, "abc")
			if err != http.ErrBodyNotAllowed {
				panic(err)
			}
		},
		"304": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Etag", `"x"`)
			w.WriteHeader(http.StatusNotModified)
		},
		"handler close": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		},
		"handler keep-alive close token": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "keep-alive, close")
			io.WriteString(w, "bye")
		},
		"identity": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Transfer-Encoding", "identity")
			io.WriteString(w, "till close")
		},
		"te chunked": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Transfer-Encoding", "chunked")
			io.WriteString(w, "chunks")
		},
		"te and length": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Transfer-Encoding", "gzip")
			w.Header().Set("Content-Length", "3")
			io.WriteString(w, "abc")
		},
		"twice": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(201)
			w.WriteHeader(202)
		},
		"header after WriteHeader": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Before", "1")
			w.WriteHeader(200)
			w.Header().Set("X-After", "1")
			io.WriteString(w, "x")
		},
		"header after WriteHeader, length known": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1")
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(200)
			w.Header().Set("X-After", "1")
			io.WriteString(w, "x")
		},
		"odd fields": func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Bad Name"] = []string{"x"}
			w.Header()["X-Newline"] = []string{"a\r\nb", "  padded  "}
			w.Header()["lower"] = []string{"as is"}
			io.WriteString(w, "x")
		},
		"nil fields": func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Date"] = nil
			w.Header()["Content-Type"] = nil // no sniffing
			io.WriteString(w, "<html>")
		},
		"switching": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "x")
			w.WriteHeader(http.StatusSwitchingProtocols)
		},
		"write string": func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"json": true}`)
		},
	}
	get := "GET /x HTTP/1.1\r\nHost: h\r\n\r\n"
	cases := []struct {
		name, handler, raw string
		own                bool
	}{
		{"plain", "plain", get, true},
		{"keep-alive twice", "plain", get + get, true},
		{"client close", "plain", "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", true},
		{"client keep-alive", "plain", "GET / HTTP/1.1\r\nHost: h\r\nConnection: Keep-Alive\r\n\r\n" + get, true},
		{"empty", "empty", get, true},
		{"status", "status", get, true},
		{"unknown status", "unknown status", get, true},
		{"length", "length", get + get, true},
		{"length no type", "length no type", get, true},
		{"encoding no type", "encoding no type", get, true},
		{"short length closes", "short length", get + get, true},
		{"long write", "long write", get + get, true},
		{"bad length", "bad length", get, true},
		{"big chunked", "big", get + get, true},
		{"one big write", "one big write", get, true},
		{"exactly 2048", "exactly 2048", get, true},
		{"flushes", "flushes", get, true},
		{"flush first", "flush first", get, true},
		{"controller flush", "controller flush", get, true},
		{"trailers", "trailers", get + get, true},
		{"prefixed trailers", "prefixed trailers", get, true},
		{"trailers with length", "trailers with length", get, true},
		{"1xx", "1xx", get, true},
		{"204 with body", "204 with body", get + get, true},
		{"304", "304", get + get, true},
		{"handler close", "handler close", get + get, true},
		{"handler close token", "handler keep-alive close token", get + get, true},
		{"identity", "identity", get, true},
		{"te chunked", "te chunked", get, true},
		{"te and length", "te and length", get, true},
		{"twice", "twice", get, true},
		{"header after WriteHeader", "header after WriteHeader", get, true},
		{"header after WriteHeader, length known", "header after WriteHeader, length known", get, true},
		{"odd fields", "odd fields", get, true},
		{"write string", "write string", get, true},
		{"nil fields", "nil fields", get, true},
		{"switching", "switching", get + get, true},
		// Request shapes.
		{"query and escapes", "plain", "GET /a%2Fb/c?x=1&y=%20 HTTP/1.1\r\nHost: h\r\n\r\n", true},
		{"repeated field", "plain", "GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nx-a: 2\r\nCookie: a=1\r\nCookie: b=2\r\n\r\n", true},
		{"repeated fields apart", "plain", "GET / HTTP/1.1\r\nX-A: 1\r\nCookie: a=1\r\nHost: h\r\nx-a: 2\r\nX-B: 0\r\nX-A: 3\r\nCookie: b=2\r\nX-B: 1\r\n\r\n", true},
		{"field whitespace", "plain", "GET / HTTP/1.1\r\nHost: h\r\nX-A: \t v \t\r\nX-Empty:\r\n\r\n", true},
		{"pragma", "plain", "GET / HTTP/1.1\r\nHost: h\r\nPragma: no-cache\r\n\r\n", true},
		{"pragma with cache-control", "plain", "GET / HTTP/1.1\r\nHost: h\r\nPragma: no-cache\r\nCache-Control: max-age=1\r\n\r\n", true},
		{"host with port", "plain", "GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", true},
		{"empty host", "plain", "GET / HTTP/1.1\r\nHost:\r\n\r\n", true},
		{"pipelined then other", "plain", get + "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc" + get, true},
		// Handed over: net/http answers, on the same connection.
		{"post", "plain", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc" + get, false},
		{"head", "plain", "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n" + get, false},
		{"http/1.0", "plain", "GET / HTTP/1.0\r\n\r\n", false},
		{"http/1.0 keep-alive", "plain", "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + get, false},
		{"no host", "plain", "GET / HTTP/1.1\r\n\r\n", false},
		{"two hosts", "plain", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", false},
		{"bad host", "plain", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", false},
		{"get with length", "plain", "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nab" + get, false},
		{"get chunked", "plain", "GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n", false},
		{"smuggling", "plain", "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + get, false},
		{"expect", "plain", "GET / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n", false},
		{"upgrade", "plain", "GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", false},
		{"connection names a field", "plain", "GET / HTTP/1.1\r\nHost: h\r\nConnection: X-A\r\nX-A: 1\r\n\r\n", false},
		{"bare LF", "plain", "GET / HTTP/1.1\nHost: h\n\n", false},
		{"folded", "plain", "GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n 2\r\n\r\n", false},
		{"space before colon", "plain", "GET / HTTP/1.1\r\nHost: h\r\nX-A : 1\r\n\r\n", false},
		{"bad name", "plain", "GET / HTTP/1.1\r\nHost: h\r\nX(A): 1\r\n\r\n", false},
		{"control in value", "plain", "GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\x012\r\n\r\n", false},
		{"utf-8 value", "plain", "GET / HTTP/1.1\r\nHost: h\r\nX-A: é\r\n\r\n", false},
		{"absolute form", "plain", "GET http://h/x HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"asterisk", "plain", "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"lower method", "plain", "get / HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"two spaces", "plain", "GET  / HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"bad escape", "plain", "GET /%zz HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"http/2 preface", "plain", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", false},
		{"garbage", "plain", "\x16\x03\x01\x00\x05hello\r\n\r\n", false},
		{"cut short", "plain", "GET / HTTP/1.1\r\nHost: h\r\n", false},
		{"large head", "plain", "GET / HTTP/1.1\r\nHost: h\r\nCookie: " + strings.Repeat("c", 6000) + "\r\n\r\n" + get, false},
	}
	// Every case has its own pair of servers and runs at once with the
	// others: most wait out a quiet spell to see the connection's fate.
	type result struct {
		wantOut, gotOut       string
		wantClosed, gotClosed bool
		wantSeen, gotSeen     []seenRequest
		gotOwn                bool
		err                   error
	}
	results := make([]result, len(cases))
	var wg sync.WaitGroup
	for i, tc := range cases {
		seen := &seenLog{}
		var took atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen.add(r)
			if _, ok := w.(*h1Writer); ok {
				took.Add(1)
			}
			name := r.Header.Get("X-Handler")
			if name == "" {
				name = "plain"
			}
			handlers[name](w, r)
		})
		p := newPair(t, h, nil)
		raw := tc.raw
		if tc.handler != "plain" {
			raw = strings.ReplaceAll(tc.raw, "Host: h\r\n", "Host: h\r\nX-Handler: "+tc.handler+"\r\n")
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := &results[i]
			res.wantOut, res.wantClosed, res.err = exchangeRaw(p.std, raw, 300*time.Millisecond)
			res.wantSeen = seen.take()
			if res.err == nil {
				res.gotOut, res.gotClosed, res.err = exchangeRaw(p.own, raw, 300*time.Millisecond)
			}
			res.gotSeen = seen.take()
			res.gotOwn = took.Load() > 0
		}()
	}
	wg.Wait()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := results[i]
			if res.err != nil {
				t.Fatal(res.err)
			}
			if noDate(res.gotOut) != noDate(res.wantOut) {
				t.Errorf("response differs\nown:\n%q\nnet/http:\n%q", res.gotOut, res.wantOut)
			}
			if res.gotClosed != res.wantClosed {
				t.Errorf("connection closed: own %v, net/http %v", res.gotClosed, res.wantClosed)
			}
			for _, s := range [][]seenRequest{res.wantSeen, res.gotSeen} {
				for j := range s {
					s[j].RemoteHost = ""
				}
			}
			if !reflect.DeepEqual(res.gotSeen, res.wantSeen) {
				t.Errorf("handler saw\nown:      %+v\nnet/http: %+v", res.gotSeen, res.wantSeen)
			}
			if res.gotOwn != tc.own {
				t.Errorf("own loop took it: %v, want %v", res.gotOwn, tc.own)
			}
		})
	}
}

// TestParseRequestHeadMatchesReadRequest: every head the own parser takes
// reads the same through http.ReadRequest (the fuzz target's seeds).
func TestParseRequestHeadMatchesReadRequest(t *testing.T) {
	for _, s := range parseSeeds {
		checkParse(t, []byte(s))
	}
}

var parseSeeds = []string{
	"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /a/b?c=d HTTP/1.1\r\nHost: example.com\r\nUser-Agent: x\r\nAccept: */*\r\n\r\n",
	"GET /%41%2f?q=%20 HTTP/1.1\r\nhost: h\r\naccept-encoding: gzip\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nPragma: no-cache\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\npragma: x\r\nPragma: no-cache\r\nConnection: Keep-Alive\r\nconnection: CLOSE\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\nX: b\r\n\r\n",
	"GET / HTTP/1.1\r\nx-a: 1\r\nHost: h\r\nB: 1\r\nX-A: 2\r\nPragma: no-cache\r\nb: 2\r\nX-a: 3\r\nC: 1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
	"GET //x HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /a#b HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX:\t\r\n\r\n",
	"GET / HTTP/1.1\r\nX: y\r\nZ: w\r\n\n", // ended by a bare LF
	// Targets around h1wire.PlainRequestURI's own reading of the URL.
	"GET /a? HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /a?? HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /a?b? HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /a:b/$&+,;=@~_.-/Z9 HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /a!b*(c)'d HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /a[b] HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /a%zz HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /a?%zz&b=c#d HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /a|b\"c<d>`{e}^ HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /? HTTP/1.1\r\nHost: h\r\n\r\n",
}

// checkParse holds parseRequestHead to net/http on b: when it takes b,
// http.ReadRequest must read the same request, with the server's own
// checks on Host.
func checkParse(t *testing.T, b []byte) {
	t.Helper()
	end := h1wire.HeadEnd(b) // the heads the loop hands the parser
	if end < 0 {
		return
	}
	head := b[:end]
	// The connection's reused containers, after a request of their own,
	// give the same request, and take exactly what is taken without them.
	var sc headScratch
	var got, prev, again http.Request
	if !parseRequestHeadInto([]byte("GET /p?q HTTP/1.1\r\nHost: p\r\nA: 1\r\nB: 2\r\nB: 3\r\n\r\n"), 0, &prev, &sc) {
		t.Fatal("the scratch's first head was refused")
	}
	took := parseRequestHeadInto(head, 0, &again, &sc)
	if !parseRequestHead(head, &got) {
		if took {
			t.Fatalf("head %q: refused without the scratch, taken with it", head)
		}
		return
	}
	if !took {
		t.Fatalf("head %q: taken without the scratch, refused with it", head)
	}
	if *again.URL != *got.URL || !reflect.DeepEqual(again.Header, got.Header) || again.Host != got.Host || again.Close != got.Close {
		t.Fatalf("head %q with the scratch:\n%+v %+v\nwithout: %+v %+v", head, *again.URL, again.Header, *got.URL, got.Header)
	}
	want, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		t.Fatalf("own parser took %q, net/http refuses it: %v", head, err)
	}
	// net/http's server also wants exactly one valid Host (ReadRequest
	// has removed the field by now).
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	_, _ = tp.ReadLine()
	mh, err := tp.ReadMIMEHeader()
	if err != nil || len(mh["Host"]) != 1 || !httpguts.ValidHostHeader(mh["Host"][0]) {
		t.Fatalf("own parser took %q with Host fields %q (%v)", head, mh["Host"], err)
	}
	for k, vs := range want.Header {
		if !validHeaderName(k) {
			t.Fatalf("own parser took %q with field name %q", head, k)
		}
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n\x00") {
				t.Fatalf("own parser took %q with field value %q", head, v)
			}
		}
	}
	if got.Method != want.Method || *got.URL != *want.URL || got.URL.String() != want.URL.String() || got.URL.Path != want.URL.Path ||
		got.URL.RawPath != want.URL.RawPath || got.URL.RawQuery != want.URL.RawQuery || got.Proto != want.Proto ||
		got.ProtoMajor != want.ProtoMajor || got.ProtoMinor != want.ProtoMinor || got.Host != want.Host ||
		got.RequestURI != want.RequestURI || got.Close != want.Close || got.ContentLength != want.ContentLength ||
		!reflect.DeepEqual(got.Header, want.Header) || len(want.TransferEncoding) != 0 || want.ContentLength != 0 {
		t.Fatalf("head %q:\nown:      %+v\nnet/http: %+v", head, got, *want)
	}
	if n, _ := io.Copy(io.Discard, want.Body); n != 0 {
		t.Fatalf("head %q: net/http reads a body of %d bytes", head, n)
	}
}

func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !isTokenByte(k[i]) {
			return false
		}
	}
	return true
}

func isTokenByte(c byte) bool {
	return c > ' ' && c < 0x7f && !strings.ContainsRune("()<>@,;:\\\"/[]?={}", rune(c))
}

func FuzzParseRequestHead(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkParse(t, b) })
}

// TestH1ServerCancelsWhenTheClientGoes: a request that outlives the
// watch delay has its context cancelled when the client closes, as
// net/http's background read does.
func TestH1ServerCancelsWhenTheClientGoes(t *testing.T) {
	started, cancelled := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(10 * time.Second):
		}
	})
	p := newPair(t, h, nil)
	c, err := net.Dial("tcp", p.own)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	<-started
	waitWatch(t, p.ownSrv, watchReading)
	c.Close()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the request's context was not cancelled when its client went away")
	}
}

// waitWatch polls until the server's one connection's client watch is in
// state st.
func waitWatch(t *testing.T, s *Server, st int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		for c := range s.conns {
			c.wmu.Lock()
			ok := c.wstate == st
			c.wmu.Unlock()
			if ok {
				s.mu.Unlock()
				return
			}
		}
		s.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no connection's watch reached state %d", st)
}

// TestH1ServerKeepsAPipelinedByteTheWatchRead: the watch's read of the
// next request's first byte loses nothing.
func TestH1ServerKeepsAPipelinedByteTheWatchRead(t *testing.T) {
	release := make(chan struct{})
	var n int
	var mu sync.Mutex
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if first {
			<-release
		}
		io.WriteString(w, r.URL.Path)
	})
	p := newPair(t, h, nil)
	c, err := net.Dial("tcp", p.own)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /one HTTP/1.1\r\nHost: h\r\n\r\n")
	waitWatch(t, p.ownSrv, watchReading)
	io.WriteString(c, "GET /two HTTP/1.1\r\nHost: h\r\n\r\n")
	// The watch read the "G": poll until it has.
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.ownSrv.mu.Lock()
		var done chan struct{}
		for cc := range p.ownSrv.conns {
			cc.wmu.Lock()
			done = cc.wdone
			cc.wmu.Unlock()
		}
		p.ownSrv.mu.Unlock()
		if done != nil {
			select {
			case <-done:
			case <-time.After(time.Millisecond):
				if time.Now().After(deadline) {
					t.Fatal("the watch read nothing")
				}
				continue
			}
		}
		break
	}
	close(release)
	br := bufio.NewReader(c)
	for _, want := range []string{"/one", "/two"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if string(b) != want {
			t.Fatalf("body %q, want %q", b, want)
		}
	}
}

// TestH1ServerPanics: a handler's panic is logged as net/http logs it
// (not http.ErrAbortHandler), and the connection is closed after what was
// written went out.
func TestH1ServerPanics(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/abort" {
			w.Header().Set("Content-Length", "10")
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "part")
			panic(http.ErrAbortHandler)
		}
		panic("boom")
	})
	p := newPair(t, h, nil)
	for _, path := range []string{"/abort", "/boom"} {
		raw := "GET " + path + " HTTP/1.1\r\nHost: h\r\n\r\n"
		want, wantClosed := exchange(t, p.std, raw, 2*time.Second)
		got, gotClosed := exchange(t, p.own, raw, 2*time.Second)
		if noDate(got) != noDate(want) || !gotClosed || !wantClosed {
			t.Fatalf("%s: own %q (closed %v), net/http %q (closed %v)", path, got, gotClosed, want, wantClosed)
		}
	}
	if logs := p.logs.String(); strings.Count(logs, "http: panic serving") != 2 || strings.Contains(logs, "abort Handler") {
		t.Fatalf("logs: %s", logs)
	}
}

// TestH1ServerTimeouts: the idle timeout closes a kept-alive connection
// and the header timeout one whose head stops half-way.
func TestH1ServerTimeouts(t *testing.T) {
	p := newPair(t, http.HandlerFunc(okHandler), func(s *http.Server) {
		s.IdleTimeout = 200 * time.Millisecond
		s.ReadHeaderTimeout = 300 * time.Millisecond
	})
	for _, raw := range []string{"GET / HTTP/1.1\r\nHost: h\r\n\r\n", "GET / HTTP/1.1\r\nHost:"} {
		start := time.Now()
		out, closed := exchange(t, p.own, raw, 5*time.Second)
		if !closed {
			t.Fatalf("%q: not closed", raw)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("%q: closed after %v", raw, d)
		}
		if strings.HasSuffix(raw, "\r\n\r\n") != strings.HasPrefix(out, "HTTP/1.1 200") {
			t.Fatalf("%q: got %q", raw, out)
		}
	}
}

// TestH1ServerShutdownClosesIdleConnections: Shutdown does not wait for
// an idle kept-alive connection, and waits for a busy one's response.
func TestH1ServerShutdownClosesIdleConnections(t *testing.T) {
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		io.WriteString(w, "done")
	})
	p := newPair(t, h, nil)
	idle, err := net.Dial("tcp", p.own)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	io.WriteString(idle, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	ibr := bufio.NewReader(idle)
	resp, err := http.ReadResponse(ibr, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	busy, err := net.Dial("tcp", p.own)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	waitWatch(t, p.ownSrv, watchReading)
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- p.ownSrv.Shutdown(ctx)
	}()
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := ibr.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: %v, want EOF", err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	default:
	}
	close(release)
	resp, err = http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Close { // ReadResponse takes "Connection: close" out of the header
		t.Fatal("the busy connection's last response does not say Connection: close")
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// BenchmarkH1Server: one keep-alive connection's GETs through net/http's
// server and through the own loop, with a handler that answers 1 KiB as
// the direct path does (length and type set, then WriteHeader and Write).
// Allocations count the client's side too.
func BenchmarkH1Server(b *testing.B) {
	body := make([]byte, 1024)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Content-Length"] = []string{"1024"}
		h["Content-Type"] = []string{"application/octet-stream"}
		h["Date"] = []string{"Tue, 01 Dec 2026 12:00:00 GMT"}
		w.WriteHeader(http.StatusOK)
		w.Write(body)
	})
	p := newPair(b, h, nil)
	for _, tc := range []struct{ name, addr string }{{"net/http", p.std}, {"own", p.own}} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := net.Dial("tcp", tc.addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			rc := testutil.NewRawClient(c)
			req := []byte("GET /x HTTP/1.1\r\nHost: h\r\nUser-Agent: bench\r\nCookie: a=b\r\n\r\n")
			b.ReportAllocs()
			for b.Loop() {
				rc.Get(b, req, nil)
			}
		})
	}
}

// namedConn is a wrapper that names its connection with NetConn, as the
// connection cap's does.
type namedConn struct{ net.Conn }

func (c namedConn) NetConn() net.Conn { return c.Conn }

type namingListener struct{ net.Listener }

func (l namingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return namedConn{c}, nil
}

// TestH1ServerReachesTheSocketBehindAWrapper: a connection under a
// wrapper that names it with NetConn (the connection cap's) still gets
// the write-then-wait and the second descriptor on its socket.
func TestH1ServerReachesTheSocketBehindAWrapper(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lim := namingListener{ln}
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			defer c.Close()
			_, _ = c.Read(make([]byte, 1))
		}
	}()
	rwc, err := lim.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer rwc.Close()
	s := New(&http.Server{})
	c := s.newConn(rwc)
	if c == nil || c.raw == nil || c.tcp == nil {
		t.Fatal("no socket behind the wrapped connection")
	}
}

// FuzzH1Server sends arbitrary bytes to the loop (with net/http's server
// behind it for what it hands over) and requires an answer that is HTTP/1.x,
// the connection ended within the deadline, and no fault of the loop.
func FuzzH1Server(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s + s))
	}
	f.Add([]byte("GET / HTTP/1.1\r\nHost: h\r\n\r\nPOST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nab"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: h\r\nCookie: " + strings.Repeat("x", 5000) + "\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: h\n\n"))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("chunked") {
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "ok")
	})
	p := newPair(f, h, nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		p.logs.Reset()
		c, err := net.Dial("tcp", p.own)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Shorter than the servers' idle timeout (10 s), so a connection
		// the loop forgot to end shows as a hang.
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write(b); err != nil {
			return // the server closed early: fine
		}
		_ = c.(*net.TCPConn).CloseWrite()
		out, err := io.ReadAll(c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("no end to the answer to %q; got %q", b, out)
		}
		// net/http answers an HTTP/1.0 request in HTTP/1.0.
		if len(out) > 0 && !bytes.HasPrefix(out, []byte("HTTP/1.1 ")) && !bytes.HasPrefix(out, []byte("HTTP/1.0 ")) {
			t.Fatalf("answer to %q is not HTTP/1.x: %q", b, out)
		}
		if logs := p.logs.String(); strings.Contains(logs, "panic serving") {
			t.Fatalf("a fault serving %q: %s", b, logs)
		}
	})
}

// TestH1ServerSeesWhatCameDuringTheResponse: bytes or an EOF that arrive
// while a request is served (a pipelined request, a half-close) end the
// wait for the next request at once: the wait must not lose the
// readiness they raised (the idle timeout here is 10 s).
func TestH1ServerSeesWhatCameDuringTheResponse(t *testing.T) {
	p := newPair(t, http.HandlerFunc(okHandler), nil)
	get := "GET / HTTP/1.1\r\nHost: h\r\n\r\n"
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", p.own)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		io.WriteString(c, get+get)
		_ = c.(*net.TCPConn).CloseWrite()
		out, err := io.ReadAll(c)
		c.Close()
		if err != nil {
			t.Fatalf("round %d: %v after %q", i, err, out)
		}
		if n := strings.Count(string(out), "HTTP/1.1 200 OK"); n != 2 {
			t.Fatalf("round %d: %d responses in %q", i, n, out)
		}
	}
}

// deadlineConn records the read deadlines set on it.
type deadlineConn struct {
	net.Conn
	set []time.Time
}

func (d *deadlineConn) SetReadDeadline(t time.Time) error {
	d.set = append(d.set, t)
	return nil
}

// The wait for the next request always has at least the idle timeout, at
// most an eighth more (a second at most), and the deadline moves only
// when it is less than the idle timeout away.
func TestH1ServerIdleDeadlineMovesOnlyWhenDue(t *testing.T) {
	for _, idle := range []time.Duration{200 * time.Millisecond, 130 * time.Second} {
		dc := &deadlineConn{}
		c := &h1Conn{s: &Server{idle: idle}, rwc: dc}
		slack := min(idle/8, time.Second)
		check := func(what string, calls int) {
			t.Helper()
			if len(dc.set) != calls {
				t.Fatalf("idle %v, %s: %d deadlines set, want %d", idle, what, len(dc.set), calls)
			}
			if got := time.Until(dc.set[calls-1]); got < idle-50*time.Millisecond || got > idle+slack {
				t.Fatalf("idle %v, %s: the deadline is %v away, want %v to %v", idle, what, got, idle, idle+slack)
			}
		}
		before := time.Now()
		c.armIdle()
		if d := dc.set[0].Sub(before); d < idle {
			t.Fatalf("idle %v: the first deadline is %v after the wait began", idle, d)
		}
		check("first wait", 1)
		for range 100 {
			c.armIdle()
		}
		check("waits right after", 1)
		c.idleUntil = monotime.Now() + int64(idle) - 1 // less than the timeout left
		c.armIdle()
		check("when due", 2)
		c.setReadDeadline(time.Time{}) // another deadline came between
		c.armIdle()
		check("after another deadline", 4)
	}
}

// TestH1WorkersAreReused: a connection accepted after another has ended
// is served by the goroutine that served the one before (with the stack
// it grew); more than maxIdleWorkers idle goroutines are not kept, and
// shutdown ends the idle ones.
func TestH1WorkersAreReused(t *testing.T) {
	var mu sync.Mutex
	var ids []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 64)
		id, _, _ := strings.Cut(strings.TrimPrefix(string(buf[:goruntime.Stack(buf, false)]), "goroutine "), " ")
		mu.Lock()
		ids = append(ids, id)
		mu.Unlock()
		w.Write([]byte("ok"))
	})
	p := newPair(t, h, nil)
	get := func() {
		t.Helper()
		c, err := net.Dial("tcp", p.own)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(c); err != nil || !bytes.HasSuffix(b, []byte("\r\n\r\nok")) {
			t.Fatalf("response %q, %v", b, err)
		}
	}
	get()
	testutil.Eventually(t, 5*time.Second, "condition", func() bool { return p.ownSrv.idleWorkers.Load() == 1 })
	get()
	mu.Lock()
	if len(ids) != 2 || ids[0] != ids[1] {
		t.Errorf("goroutines of two connections one after the other: %q, want one reused", ids)
	}
	mu.Unlock()
	testutil.Eventually(t, 5*time.Second, "condition", func() bool { return p.ownSrv.idleWorkers.Load() == 1 })

	// More connections at once than idle workers are kept.
	const n = maxIdleWorkers + 8
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", p.own)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	testutil.Eventually(t, 5*time.Second, "condition", func() bool {
		p.ownSrv.mu.Lock()
		defer p.ownSrv.mu.Unlock()
		return len(p.ownSrv.conns) == n
	})
	for _, c := range conns {
		c.Close()
	}
	testutil.Eventually(t, 5*time.Second, "condition", func() bool {
		p.ownSrv.mu.Lock()
		defer p.ownSrv.mu.Unlock()
		return len(p.ownSrv.conns) == 0
	})
	testutil.Eventually(t, 5*time.Second, "condition", func() bool { return p.ownSrv.idleWorkers.Load() == maxIdleWorkers })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.ownSrv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "condition", func() bool { return p.ownSrv.idleWorkers.Load() == 0 })
}

// watchReadDone polls until the server's one connection's client watch is
// reading, then waits for that read to end.
func watchReadDone(t *testing.T, s *Server) {
	t.Helper()
	waitWatch(t, s, watchReading)
	var done chan struct{}
	s.mu.Lock()
	for c := range s.conns {
		c.wmu.Lock()
		done = c.wdone
		c.wmu.Unlock()
	}
	s.mu.Unlock()
	if done == nil {
		return // the request ended: its watch with it
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch read nothing")
	}
}

// TestH1ServerKeepsTheWatchByteWhileARequestIsBuffered: a request served
// from the buffer while the watch's byte of a later one waits starts no
// second watch, whose byte would take the first one's place.
func TestH1ServerKeepsTheWatchByteWhileARequestIsBuffered(t *testing.T) {
	release := map[string]chan struct{}{"/one": make(chan struct{}), "/two": make(chan struct{})}
	started := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/two" {
			close(started)
		}
		if ch := release[r.URL.Path]; ch != nil {
			<-ch
		}
		io.WriteString(w, r.Method+" "+r.URL.Path)
	})
	p := newPair(t, h, nil)
	c, err := net.Dial("tcp", p.own)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: h\r\n\r\n" }
	io.WriteString(c, req("/one")+req("/two"))
	waitWatch(t, p.ownSrv, watchReading)
	io.WriteString(c, req("/three")) // the watch of /one reads its "G"
	watchReadDone(t, p.ownSrv)
	close(release["/one"])
	// /two comes from the buffer, the "G" of /three still in the stash.
	<-started
	io.WriteString(c, req("/four"))
	// A watch of /two would start after watchDelay (5 ms): given 200 times
	// that, it reads the "G" of /four.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		p.ownSrv.mu.Lock()
		var done chan struct{}
		for cc := range p.ownSrv.conns {
			cc.wmu.Lock()
			if cc.wstate == watchReading {
				done = cc.wdone
			}
			cc.wmu.Unlock()
		}
		p.ownSrv.mu.Unlock()
		if done != nil {
			<-done
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release["/two"])
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for _, want := range []string{"GET /one", "GET /two", "GET /three", "GET /four"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response for %s: %v", want, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(b) != want {
			t.Fatalf("%d %q, want 200 %q", resp.StatusCode, b, want)
		}
	}
}

// TestH1ServerWatchStartsAtItsOwnRequestsDelay: a request's client watch
// starts its read no sooner than the watch delay after that request began,
// also when the request before it on the connection, answered quickly,
// began earlier (its delay ends while the second request runs).
func TestH1ServerWatchStartsAtItsOwnRequestsDelay(t *testing.T) {
	const watch = 400 * time.Millisecond
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		_, _ = io.WriteString(w, "ok")
	})
	p := ownServer(t, h, time.Minute, watch, nil)
	c, err := net.Dial("tcp", p.own)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	wc := &waitConn{t: t, c: c, br: bufio.NewReader(c)}
	wc.send(waitGet)
	wc.expect("ok")
	// Half the delay between the two requests' starts: a gap of time to
	// measure, not a condition to wait for.
	time.Sleep(watch / 2)
	sent := time.Now()
	wc.send("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	waitWatch(t, p.ownSrv, watchReading)
	if d := time.Since(sent); d < watch {
		t.Fatalf("the watch read %v after its request was sent, before the %v delay", d, watch)
	}
	close(release)
	wc.expect("ok")
}

// TestH1ServerDateIsTheSharedValue: the Date field the loop adds is
// proxy/internal/httpdate's value (its clock the test's), which changes
// with the second (the rule is that package's test's).
func TestH1ServerDateIsTheSharedValue(t *testing.T) {
	// Atomic: the loop reads them on its goroutines.
	var mono, wall atomic.Int64
	mono.Store(1 << 62)
	wall.Store(time.Date(2026, 12, 6, 10, 0, 0, 300e6, time.UTC).UnixNano())
	setDateClock(t, mono.Load, func() time.Time { return time.Unix(0, wall.Load()) })
	p := ownServer(t, http.HandlerFunc(okHandler), time.Minute, watchDelay, nil)
	c, err := net.Dial("tcp", p.own)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	wc := &waitConn{t: t, c: c, br: bufio.NewReader(c)}
	for _, want := range []string{"Sun, 06 Dec 2026 10:00:00 GMT", "Sun, 06 Dec 2026 10:00:01 GMT"} {
		wc.send(waitGet)
		if got := wc.expect("ok").Header.Get("Date"); got != want {
			t.Fatalf("Date %q, want %q", got, want)
		}
		mono.Add(int64(time.Second))
		wall.Add(int64(time.Second))
	}
}

// BenchmarkH1ServerDate: BenchmarkH1Server's own loop with a handler that
// leaves the Date field to the loop.
func BenchmarkH1ServerDate(b *testing.B) {
	body := make([]byte, 1024)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Content-Length"] = []string{"1024"}
		h["Content-Type"] = []string{"application/octet-stream"}
		w.WriteHeader(http.StatusOK)
		w.Write(body)
	})
	p := ownServer(b, h, time.Minute, watchDelay, nil)
	c, err := net.Dial("tcp", p.own)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rc := testutil.NewRawClient(c)
	req := []byte("GET /x HTTP/1.1\r\nHost: h\r\nUser-Agent: bench\r\nCookie: a=b\r\n\r\n")
	b.ReportAllocs()
	for b.Loop() {
		rc.Get(b, req, nil)
	}
}

// A connection's scratch takes a Host it took before without the host
// rule's look, and holds any other Host to it.
func TestScratchHoldsANewHostToTheRule(t *testing.T) {
	var sc headScratch
	var r http.Request
	for _, c := range []struct {
		head string
		ok   bool
	}{
		{"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n", true},
		{"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n", true},
		{"GET / HTTP/1.1\r\nHost: a example\r\n\r\n", false},
		{"GET / HTTP/1.1\r\nHost: a.example\"\r\n\r\n", false},
		{"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n", true},
		{"GET / HTTP/1.1\r\nHost: a.exampl{\r\n\r\n", false},
	} {
		if got := parseRequestHeadInto([]byte(c.head), 0, &r, &sc); got != c.ok {
			t.Errorf("%q after the heads before: taken %v, want %v", c.head, got, c.ok)
		}
	}
}
