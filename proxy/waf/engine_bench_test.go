package waf

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tether-proxy/tether/proxy/config"
)

// BenchmarkCorazaAlone runs one transaction on the compiled rule set
// without tether's data path, as Coraza's own CRS benchmarks do: a GET, a
// 16 KiB form of ~150 short fields, and a 16 KiB form of one field. It
// tells the engine's cost from tether's.
func BenchmarkCorazaAlone(b *testing.B) {
	cfg, _, err := config.Parse([]byte(`{"Waf":{"Mode":"Detection"},"ReverseProxy":{"Routes":{"r":{"ClusterId":"c","Match":{"Path":"{**all}"}}},"Clusters":{"c":{"Destinations":{"d":{"Address":"http://127.0.0.1:1"}}}}}}`), "json")
	if err != nil {
		b.Fatal(err)
	}
	fw, errs := New(cfg, nil, Options{})
	if errs != nil {
		b.Fatal(errs)
	}
	var many strings.Builder
	for i := 0; many.Len() < 16<<10; i++ {
		fmt.Fprintf(&many, "field%d=%s&", i, strings.Repeat("lorem+ipsum+dolor+sit+amet+", 4))
	}
	one := "text=" + strings.Repeat("lorem+ipsum+dolor+sit+amet+", 16<<10/27+1)
	for _, c := range []struct{ name, body string }{{"get", ""}, {"form16k-many-fields", many.String()[:16<<10]}, {"form16k-one-field", one[:16<<10]}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				tx := fw.waf.NewTransaction()
				tx.ProcessConnection("192.0.2.1", 5555, "127.0.0.1", 8080)
				method := "GET"
				if c.body != "" {
					method = "POST"
				}
				tx.ProcessURI("/api/users/42?x=1", method, "HTTP/1.1")
				tx.AddRequestHeader("Host", "front.example")
				tx.AddRequestHeader("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) bench")
				tx.AddRequestHeader("Accept", "text/html")
				if c.body != "" {
					tx.AddRequestHeader("Content-Type", "application/x-www-form-urlencoded")
				}
				tx.ProcessRequestHeaders()
				if c.body != "" {
					_, _, _ = tx.WriteRequestBody([]byte(c.body))
				}
				_, _ = tx.ProcessRequestBody()
				tx.ProcessLogging()
				_ = tx.Close()
			}
		})
	}
}
