package affinity

import (
	"strconv"
	"testing"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// BenchmarkResolve measures resolution of a valid key (the common request)
// per policy and cluster size; the figures must stay flat in n (O(1)
// lookup). Sealed policies include the AES-GCM open of the fake keyring.
func BenchmarkResolve(b *testing.B) {
	kr := newFakeKeyring(b)
	for _, pol := range []string{"HashCookie", "ArrCookie", "Cookie", "CustomHeader", "EnvelopeCookie", "EnvelopeHeader"} {
		for _, n := range []int{3, 100, 10000} {
			b.Run(pol+"/"+strconv.Itoa(n), func(b *testing.B) {
				ds := make([]*upstream.Destination, n)
				for i := range ds {
					ds[i] = dest("dest-" + strconv.Itoa(i))
				}
				c := cluster("c", ds...)
				p := mustNew(b, "c", enabled(pol, "K"), c, kr)
				r := requestWith(p, issueValue(b, p, ds[n/2]))
				r.Header.Add("Cookie", "a=1; b=2")
				buf := make([]*upstream.Destination, 0, 8)
				if d := p.Resolve(r, c, t0, buf); d.Outcome != Routed {
					b.Fatalf("outcome %v", d.Outcome)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					p.Resolve(r, c, t0, buf[:0])
				}
			})
		}
	}
}

// BenchmarkResolvePath shows the cost of the paths that are O(n) by nature:
// no session (every available destination is a candidate) and
// redistribution (rendezvous over all groups), HashCookie.
func BenchmarkResolvePath(b *testing.B) {
	for _, path := range []string{"NoSession", "FailedOpen"} {
		for _, n := range []int{3, 100, 10000} {
			b.Run(path+"/"+strconv.Itoa(n), func(b *testing.B) {
				ds := make([]*upstream.Destination, n)
				for i := range ds {
					ds[i] = dest("dest-" + strconv.Itoa(i))
				}
				c := cluster("c", ds...)
				p := mustNew(b, "c", enabled("HashCookie", "K"), c, nil)
				r := request()
				if path == "FailedOpen" {
					r = request("Cookie: K=" + refHashCookie("gone"))
				}
				buf := make([]*upstream.Destination, 0, n)
				b.ReportAllocs()
				for b.Loop() {
					p.Resolve(r, c, t0, buf[:0])
				}
			})
		}
	}
}
