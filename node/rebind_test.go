package node

import (
	"net/http"
	"testing"
)

// Without a token, a read under a foreign Host name (a web page reading
// the admin API through a DNS name rebound to loopback) is refused as a
// write is; /healthz, /readyz and the page's assets (no data) are not.
func TestAdminRefusesTokenlessReadsUnderAForeignHost(t *testing.T) {
	n, _ := startNode(t, "")
	addr := n.AdminAddr().String()
	tok, _ := startNode(t, "tok")
	tokAddr := tok.AdminAddr().String()
	cases := []struct {
		desc   string
		node   string
		path   string
		host   string
		origin string
		token  string
		want   int
	}{
		{desc: "members by IP", node: addr, path: "/v1/members", host: addr, want: 200},
		{desc: "members by localhost", node: addr, path: "/v1/members", host: "localhost:9901", want: 200},
		{desc: "members by the node's name", node: addr, path: "/v1/members", host: "t1:9901", want: 200},
		{desc: "members through a rebound name", node: addr, path: "/v1/members", host: "evil.example:9901", want: 403},
		{desc: "metrics through a rebound name", node: addr, path: "/metrics", host: "evil.example", want: 403},
		{desc: "status through a rebound name", node: addr, path: "/v1/status", host: "evil.example", want: 403},
		{desc: "keyring through a rebound name", node: addr, path: "/v1/keyring", host: "evil.example", want: 403},
		{desc: "destinations through a rebound name", node: addr, path: "/v1/clusters/app/destinations", host: "evil.example", want: 403},
		{desc: "events through a rebound name", node: addr, path: "/v1/events", host: "evil.example", want: 403},
		{desc: "members from a foreign origin", node: addr, path: "/v1/members", host: addr, origin: "https://evil.example", want: 403},
		{desc: "the page's own origin", node: addr, path: "/v1/members", host: addr, origin: "http://" + addr, want: 200},
		{desc: "healthz under any host", node: addr, path: "/healthz", host: "evil.example", want: 200},
		{desc: "readyz under any host", node: addr, path: "/readyz", host: "evil.example", want: 200},
		{desc: "the page's assets under any host", node: addr, path: "/ui/", host: "evil.example", want: 200},
		{desc: "with a token: a name the operator chose, token sent", node: tokAddr, path: "/v1/members", host: "tether.internal", token: "tok", want: 200},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			req, _ := http.NewRequest("GET", "http://"+c.node+c.path, nil)
			req.Host = c.host
			if c.origin != "" {
				req.Header.Set("Origin", c.origin)
			}
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("GET %s with Host %q: status %d, want %d", c.path, c.host, resp.StatusCode, c.want)
			}
		})
	}
}
