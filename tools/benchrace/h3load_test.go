package main

import (
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// TestH3LoadCountsRequests: the h3 case's load sends its requests over
// HTTP/3 with the given fields, and a run answered other than 200
// throughout is an error.
func TestH3LoadCountsRequests(t *testing.T) {
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	files, err := writeCert(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(files.cert, files.key)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http3.Server{
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}}),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Cookie") != "s=1" || r.ProtoMajor != 3 {
				w.WriteHeader(400)
			}
			_, _ = w.Write([]byte("hello"))
		}),
	}
	go func() { _ = srv.Serve(pc) }()
	t.Cleanup(func() { _ = srv.Close(); _ = pc.Close() })
	url := "https://" + pc.LocalAddr().String()

	res, err := h3Load(url+"/hash/1k", 2, 2, 300*time.Millisecond, []string{"Cookie: s=1"})
	if err != nil || res.Requests == 0 || res.Errors != 0 || res.RPS <= 0 || res.P50us <= 0 {
		t.Fatalf("h3load: %+v, %v", res, err)
	}
	if _, err := h3Load(url+"/x", 1, 2, 100*time.Millisecond, nil); err == nil || !strings.Contains(err.Error(), "no request completed") {
		t.Fatalf("a load answered 400 throughout: %v", err)
	}
	if _, err := h3Load("http://"+pc.LocalAddr().String(), 1, 1, time.Millisecond, nil); err == nil {
		t.Fatal("h3load took an http URL")
	}
}
