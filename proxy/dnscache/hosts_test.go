package dnscache

import (
	"strings"
	"testing"
)

func TestParseHosts(t *testing.T) {
	cases := []struct {
		desc, in string
		want     map[string]string
	}{
		{"address then names", "127.0.0.1 a.test b.test\n", map[string]string{"a.test": "127.0.0.1", "b.test": "127.0.0.1"}},
		{"comments and blank lines ignored", "# c\n\n  127.0.0.1 a.test # b.test\n", map[string]string{"a.test": "127.0.0.1"}},
		{"names lowercased, trailing dot dropped", "127.0.0.1 A.Test.\n", map[string]string{"a.test": "127.0.0.1"}},
		{"bad address line skipped", "300.0.0.1 a.test\nnope b.test\n::1 c.test", map[string]string{"c.test": "::1"}},
		{"name on several lines keeps each address once", "127.0.0.1 a.test\n::1 a.test\n127.0.0.1 a.test\n", map[string]string{"a.test": "127.0.0.1,::1"}},
		{"tabs and CRLF", "127.0.0.1\ta.test\r\n", map[string]string{"a.test": "127.0.0.1"}},
		{"address without names ignored", "127.0.0.1\n", map[string]string{}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			got := parseHosts([]byte(tc.in))
			if len(got) != len(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			for name, want := range tc.want {
				if s := addrs2str(got[name]); s != want {
					t.Errorf("%s: got %s, want %s", name, s, want)
				}
			}
		})
	}
}

func FuzzParseHosts(f *testing.F) {
	f.Add([]byte("127.0.0.1 localhost\n::1 localhost ip6-localhost # comment\n"))
	f.Add([]byte("fe80::1%lo0 link.local.\r\n10.0.0.1\tA.B\tc\n"))
	f.Add([]byte("# only comment\n\n\t\n"))
	f.Add([]byte("::ffff:1.2.3.4 mapped .\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for name, addrs := range parseHosts(data) {
			if name == "" || name != strings.ToLower(name) || strings.HasSuffix(name, ".") || strings.ContainsAny(name, " \t\n#") {
				t.Fatalf("bad name %q", name)
			}
			if len(addrs) == 0 {
				t.Fatalf("name %q without addresses", name)
			}
			seen := map[string]bool{}
			for _, a := range addrs {
				if !a.IsValid() || a.Is4In6() || seen[a.String()] {
					t.Fatalf("name %q: bad or repeated address %v", name, a)
				}
				seen[a.String()] = true
			}
		}
	})
}
