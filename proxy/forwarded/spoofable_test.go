package forwarded

import "testing"

// TestSpoofable: the switch says true for exactly the names of the
// spoofable list, canonical as the servers store them.
func TestSpoofable(t *testing.T) {
	in := map[string]bool{}
	for _, k := range spoofable {
		in[k] = true
		if !Spoofable(k) {
			t.Errorf("%q: listed as spoofable, Spoofable says no", k)
		}
	}
	others := []string{"", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Forwarded",
		"x-real-ip", "X-REAL-IP", "X-Real-Ip ", "X-Forwarded-", "X-Forwarded-Prefixx", "Client-Ipx",
		"Host", "User-Agent", "Cookie", "Traceparent"}
	for k := range underscoreFolded {
		others = append(others, k)
	}
	for _, k := range others {
		if got := Spoofable(k); got != in[k] {
			t.Errorf("%q: Spoofable %v, listed %v", k, got, in[k])
		}
	}
}
