package h2server

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkServe: GETs answered with 1 KiB over one h2c connection, 8
// streams at a time, by the own server and by net/http's (the client's
// cost is in both).
func BenchmarkServe(b *testing.B) {
	body := strings.Repeat("x", 1024)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, body)
	})
	for _, own := range []bool{true, false} {
		name := "stdlib"
		if own {
			name = "own"
		}
		b.Run(name, func(b *testing.B) {
			srv := &http.Server{Handler: h, Protocols: new(http.Protocols)}
			srv.Protocols.SetUnencryptedHTTP2(true)
			if own {
				New(srv)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = srv.Serve(ln) }()
			defer srv.Close()
			tr := &http.Transport{Protocols: new(http.Protocols)}
			tr.Protocols.SetUnencryptedHTTP2(true)
			defer tr.CloseIdleConnections()
			url := "http://" + ln.Addr().String() + "/"
			b.SetParallelism(8)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest("GET", url, nil)
					resp, err := tr.RoundTrip(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}
