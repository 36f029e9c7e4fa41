package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"
)

// wafBenchConfig is benchConfig's route with the given Waf section.
func wafBenchConfig(mode string) string {
	return strings.Replace(benchConfig, `"TrustedProxies"`, `"Waf": {"Mode": "`+mode+`"}, "TrustedProxies"`, 1)
}

// form16k is a 16 KiB urlencoded form of ordinary fields.
var form16k = func() string {
	var b strings.Builder
	for i := 0; b.Len() < 16<<10; i++ {
		fmt.Fprintf(&b, "field%d=%s&", i, strings.Repeat("lorem+ipsum+dolor+sit+amet+", 4))
	}
	return b.String()[:16<<10]
}()

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWafServeHTTP is BenchmarkServeHTTP (in-memory backend) with the
// WAF off, in Detection and in Prevention at paranoia 1, for a GET and a
// POST of a 16 KiB form. cpu-ns/op is process CPU time per request.
func BenchmarkWafServeHTTP(b *testing.B) {
	for _, mode := range []string{"Off", "Detection", "Prevention"} {
		for _, body := range []string{"", form16k} {
			name := mode + "/get"
			if body != "" {
				name = mode + "/form16k"
			}
			b.Run(name, func(b *testing.B) {
				h := newHarness(b, mustParse(b, wafBenchConfig(mode)), func(o *Options) { o.AccessLog = nil })
				h.p.rt.Load().clusters["c"].rp.Transport = fakeTransport{}
				w := &discardWriter{h: http.Header{}}
				rd := strings.NewReader(body)
				req := httptest.NewRequest("GET", "http://front.example/api/users/42?x=1", nil)
				if body != "" {
					req = httptest.NewRequest("POST", "http://front.example/api/users/42?x=1", rd)
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				}
				req.RemoteAddr = "192.0.2.1:5555"
				req.Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) bench")
				req.Header.Set("Accept", "text/html")
				b.ReportAllocs()
				b.ResetTimer()
				cpu := cpuTime()
				for i := 0; i < b.N; i++ {
					clear(w.h)
					if body != "" {
						rd.Reset(body)
						req.Body = io.NopCloser(rd)
					}
					h.p.ServeHTTP(w, req)
				}
				b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// BenchmarkWafKeepAlive sends requests over one keep-alive loopback
// connection through tether's handler to a loopback backend; cpu-ns/op is
// the whole process's CPU per request (client, tether and backend).
func BenchmarkWafKeepAlive(b *testing.B) {
	be := newBackend(b, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	})
	for _, mode := range []string{"Off", "Detection", "Prevention"} {
		for _, body := range []string{"", form16k} {
			name := mode + "/get"
			if body != "" {
				name = mode + "/form16k"
			}
			b.Run(name, func(b *testing.B) {
				cfg := strings.Replace(simpleConfig(map[string]string{"d1": be.URL}, "", "", `"Waf": {"Mode": "`+mode+`"}`), `"{**catch-all}"`, `"{**catch-all}"`, 1)
				h := newHarness(b, mustParse(b, cfg), func(o *Options) { o.AccessLog = nil })
				c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
				defer c.CloseIdleConnections()
				b.ReportAllocs()
				b.ResetTimer()
				cpu := cpuTime()
				for i := 0; i < b.N; i++ {
					var req *http.Request
					if body == "" {
						req, _ = http.NewRequest("GET", h.front.URL+"/api/users/42?x=1", nil)
					} else {
						req, _ = http.NewRequest("POST", h.front.URL+"/api/users/42?x=1", strings.NewReader(body))
						req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
					}
					req.Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) bench")
					resp, err := c.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Fatalf("status %d", resp.StatusCode)
					}
				}
				b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
