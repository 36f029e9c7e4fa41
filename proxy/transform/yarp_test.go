package transform

// One table test per YARP transform added after the first set; expected
// values come from YARP's transforms documentation and its unit tests
// (test/ReverseProxy.Tests/Transforms/*Tests.cs), not from this code.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// rewrite does what proxy.rewrite does around ApplyRequest: out is
// ReverseProxy's clone of in, and without RequestHeadersCopy it starts
// without the client's headers.
func rewrite(t *testing.T, dicts []map[string]string, matchPath string, in *http.Request) *http.Request {
	t.Helper()
	tf, errs := CompileRoute("T", dicts, matchPath)
	if errs != nil {
		t.Fatalf("Compile: %v", errs)
	}
	out := in.Clone(context.Background())
	src := out.Header
	if !tf.CopyRequestHeaders() {
		out.Header = http.Header{}
	}
	tf.ApplyRequest(in, out, src)
	return out
}

func newReq(method, target string, hdr ...string) *http.Request {
	r := httptest.NewRequest(method, "http://client.example"+target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	return r
}

func TestPathPattern(t *testing.T) {
	cases := []struct {
		desc, route, target, pattern string
		wantPath, wantQuery          string
	}{
		{"YARP's documented example", "/api/{plugin}/stuff/{**remainder}", "/api/v1/stuff/more/stuff", "/my/{plugin}/api/{**remainder}", "/my/v1/api/more/stuff", ""},
		{"every value bound", "/{a}/{b}/{c}", "/6/7/8", "/{a}/{b}/{c}", "/6/7/8", ""},
		{"a trailing parameter without a value is dropped", "/{a}/{b}/{c}", "/6/7/8", "/{a}/foo/{b}/{c}/{d}", "/6/foo/7/8", ""},
		{"values the pattern does not name are dropped", "/{a}/{b}/{c}", "/6/7/8", "/{a}/foo/{b}", "/6/foo/7", ""},
		{"{**name} keeps slashes", "/{a}/{b}/{**remainder}", "/abc/def/klm/nop/qrs", "/{a}/{b}/{**remainder}", "/abc/def/klm/nop/qrs", ""},
		{"{*name} encodes slashes", "/{**rest}", "/a/b", "/x/{*rest}", "/x/a%2Fb", ""},
		{"a catch-all keeps the trailing slash", "/api/{**rest}", "/api/a/b/", "/v2/{**rest}", "/v2/a/b/", ""},
		{"values are encoded as .NET's UrlEncoder does", "/api/{p}", "/api/a%20b:c", "/v/{p}", "/v/a%20b%3Ac", ""},
		{"an encoded slash stays encoded", "/api/{p}", "/api/a%2Fb", "/v/{p}", "/v/a%2Fb", ""},
		{"route names are case-insensitive", "/api/{Plugin}", "/api/x", "/v/{PLUGIN}", "/v/x", ""},
		{"an optional part after '.' drops the '.'", "/{name}", "/readme", "/f/{name}.{ext?}", "/f/readme", ""},
		{"a missing value before more text makes YARP's empty path", "/{a}", "/6", "/{d}/x", "", ""},
		{"the query is kept", "/api/{p}", "/api/x?q=1", "/v/{p}", "/v/x", "q=1"},
		{"literal text only", "/{**rest}", "/a", "/fixed/path", "/fixed/path", ""},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			out := rewrite(t, []map[string]string{{"PathPattern": c.pattern}}, c.route, newReq("GET", c.target))
			if got := out.URL.EscapedPath(); got != c.wantPath || out.URL.RawQuery != c.wantQuery {
				t.Errorf("path %q query %q, want %q %q", got, out.URL.RawQuery, c.wantPath, c.wantQuery)
			}
		})
	}
}

func TestQueryValueParameter(t *testing.T) {
	cases := []struct {
		desc, query string
		dict        map[string]string
		want        string
	}{
		{"Append adds a parameter", "", map[string]string{"QueryValueParameter": "z", "Append": "foo"}, "z=foo"},
		{"Append keeps an existing value", "z=1", map[string]string{"QueryValueParameter": "z", "Append": "foo"}, "z=1&z=foo"},
		{"Set overwrites an existing value", "z=1", map[string]string{"QueryValueParameter": "z", "Set": "foo"}, "z=foo"},
		{"Set adds a parameter", "", map[string]string{"QueryValueParameter": "z", "Set": "foo"}, "z=foo"},
		{"Set an empty value", "z=foo", map[string]string{"QueryValueParameter": "z", "Set": ""}, "z="},
		{"Set an empty value beside another", "x=1", map[string]string{"QueryValueParameter": "z", "Set": ""}, "x=1&z="},
		{"Append an empty value", "z=foo", map[string]string{"QueryValueParameter": "z", "Append": ""}, "z=foo&z="},
		{"names compare case-insensitively", "Z=1", map[string]string{"QueryValueParameter": "z", "Set": "foo"}, "Z=foo"},
		{"YARP's documented example", "a=b", map[string]string{"QueryValueParameter": "foo", "Append": "remainder"}, "a=b&foo=remainder"},
		{"values are encoded as .NET's UrlEncoder does", "", map[string]string{"QueryValueParameter": "z", "Set": "a b/c&d+é"}, "z=a%20b%2Fc%26d%2B%C3%A9"},
		{"the rebuilt query decodes the original", "a=x+y&b=%41", map[string]string{"QueryValueParameter": "z", "Set": "1"}, "a=x%20y&b=A&z=1"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			target := "/p"
			if c.query != "" {
				target += "?" + c.query
			}
			out := rewrite(t, []map[string]string{c.dict}, "", newReq("GET", target))
			if out.URL.RawQuery != c.want {
				t.Errorf("query %q, want %q", out.URL.RawQuery, c.want)
			}
		})
	}
}

func TestQueryRouteParameter(t *testing.T) {
	cases := []struct {
		desc, route, target string
		dict                map[string]string
		want                string
	}{
		{"Append the first route value", "/{a}/{b}/{c}", "/6/7/8", map[string]string{"QueryRouteParameter": "z", "Append": "a"}, "z=6"},
		{"Append the last route value", "/{a}/{b}/{c}", "/6/7/8", map[string]string{"QueryRouteParameter": "z", "Append": "c"}, "z=8"},
		{"a catch-all's slashes are encoded", "/{a}/{*remainder}", "/6/7/8", map[string]string{"QueryRouteParameter": "z", "Append": "remainder"}, "z=7%2F8"},
		{"Append keeps an existing value", "/{a}/{b}/{c}", "/6/7/8?z=1", map[string]string{"QueryRouteParameter": "z", "Append": "a"}, "z=1&z=6"},
		{"Set overwrites an existing value", "/{a}/{b}/{c}", "/6/7/8?z=1", map[string]string{"QueryRouteParameter": "z", "Set": "a"}, "z=6"},
		{"Set adds a parameter", "/{a}/{b}/{c}", "/6/7/8", map[string]string{"QueryRouteParameter": "z", "Set": "a"}, "z=6"},
		{"a missing route value changes nothing", "/{a}/{b}/{c}", "/6/7/8?z=1", map[string]string{"QueryRouteParameter": "z", "Set": "nope"}, "z=1"},
		{"an encoded slash in the path is a slash in the query", "/{a}", "/x%2Fy", map[string]string{"QueryRouteParameter": "z", "Set": "a"}, "z=x%2Fy"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			out := rewrite(t, []map[string]string{c.dict}, c.route, newReq("GET", c.target))
			if out.URL.RawQuery != c.want {
				t.Errorf("query %q, want %q", out.URL.RawQuery, c.want)
			}
		})
	}
}

func TestQueryRemoveParameter(t *testing.T) {
	cases := []struct {
		desc, query, remove, want string
	}{
		{"removes an existing parameter", "z=1", "z", ""},
		{"leaves other parameters", "z=1&a=2", "z", "a=2"},
		{"a missing parameter changes nothing", "z=1", "a", "z=1"},
		{"names compare case-insensitively", "z=1", "Z", ""},
		{"every value goes", "z=1&a=2&z=3", "z", "a=2"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			out := rewrite(t, []map[string]string{{"QueryRemoveParameter": c.remove}}, "", newReq("GET", "/p?"+c.query))
			if out.URL.RawQuery != c.want {
				t.Errorf("query %q, want %q", out.URL.RawQuery, c.want)
			}
		})
	}
}

func TestHttpMethodChange(t *testing.T) {
	cases := []struct {
		desc, from, to, method, want string
	}{
		{"PUT becomes POST", "PUT", "POST", "PUT", "POST"},
		{"other methods are left alone", "PUT", "POST", "GET", "GET"},
		{"the method compares case-insensitively", "put", "POST", "PUT", "POST"},
		{"standard methods are upper-cased", "DELETE", "patch", "DELETE", "PATCH"},
		{"an extension method is sent as written", "GET", "PURGE", "GET", "PURGE"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			out := rewrite(t, []map[string]string{{"HttpMethodChange": c.from, "Set": c.to}}, "", newReq(c.method, "/"))
			if out.Method != c.want {
				t.Errorf("method %q, want %q", out.Method, c.want)
			}
		})
	}
}

func TestRequestHeaderRouteValue(t *testing.T) {
	cases := []struct {
		desc, route, target string
		hdr                 []string
		dict                map[string]string
		want                []string // X-Foo's values; nil: absent
	}{
		{"YARP's documented example", "/api/{*remainder}", "/api/more/stuff", nil, map[string]string{"RequestHeaderRouteValue": "X-Foo", "Append": "remainder"}, []string{"more/stuff"}},
		{"Set replaces the client's value", "/{a}", "/6", []string{"X-Foo", "old"}, map[string]string{"RequestHeaderRouteValue": "x-foo", "Set": "a"}, []string{"6"}},
		{"Append keeps the client's value", "/{a}", "/6", []string{"X-Foo", "old"}, map[string]string{"RequestHeaderRouteValue": "X-Foo", "Append": "a"}, []string{"old", "6"}},
		{"a missing route value changes nothing", "/{a}", "/6", []string{"X-Foo", "old"}, map[string]string{"RequestHeaderRouteValue": "X-Foo", "Set": "b"}, []string{"old"}},
		{"a value that is no valid header value is not sent", "/{a}", "/x%0D%0AEvil:%201", nil, map[string]string{"RequestHeaderRouteValue": "X-Foo", "Set": "a"}, nil},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			out := rewrite(t, []map[string]string{c.dict}, c.route, newReq("GET", c.target, c.hdr...))
			if got := out.Header["X-Foo"]; !reflect.DeepEqual(got, c.want) {
				t.Errorf("X-Foo = %q, want %q", got, c.want)
			}
		})
	}
}

func TestRequestHeadersAllowed(t *testing.T) {
	client := []string{"Header1", "v1", "Header2", "v2", "Anotherheader", "x", "Empty", ""}
	cases := []struct {
		desc  string
		dicts []map[string]string
		want  http.Header
	}{
		{"only the listed headers are copied, names case-insensitive", []map[string]string{{"RequestHeadersAllowed": "header1; HEADER2"}},
			http.Header{"Header1": {"v1"}, "Header2": {"v2"}}},
		{"an empty value is not copied", []map[string]string{{"RequestHeadersAllowed": "Empty;Header1"}},
			http.Header{"Header1": {"v1"}}},
		{"an empty list copies nothing", []map[string]string{{"RequestHeadersAllowed": ""}}, http.Header{}},
		{"a header set before the list stays", []map[string]string{{"RequestHeader": "X-Set", "Set": "s"}, {"RequestHeadersAllowed": "Header1"}},
			http.Header{"X-Set": {"s"}, "Header1": {"v1"}}},
		{"an Append after the list does not bring back the client's value", []map[string]string{{"RequestHeadersAllowed": "Header1"}, {"RequestHeader": "Header2", "Append": "a"}},
			http.Header{"Header1": {"v1"}, "Header2": {"a"}}},
		{"a later RequestHeadersCopy true wins and copies each header once", []map[string]string{{"RequestHeadersAllowed": "Header1"}, {"RequestHeadersCopy": "true"}},
			http.Header{"Header1": {"v1"}, "Header2": {"v2"}, "Anotherheader": {"x"}, "Empty": {""}}},
		{"RequestHeadersCopy false: Append still finds the client's value, as in YARP", []map[string]string{{"RequestHeadersCopy": "false"}, {"RequestHeader": "Header1", "Append": "a"}},
			http.Header{"Header1": {"v1", "a"}}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			out := rewrite(t, c.dicts, "", newReq("GET", "/", client...))
			if !reflect.DeepEqual(out.Header, c.want) {
				t.Errorf("headers %v, want %v", out.Header, c.want)
			}
		})
	}
}

func TestClientCert(t *testing.T) {
	cert := &x509.Certificate{Raw: []byte("I'm a certificate")}
	cases := []struct {
		desc string
		tls  *tls.ConnectionState
		hdr  []string
		want []string
	}{
		{"the client certificate is sent base64-encoded", &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}, nil, []string{"SSdtIGEgY2VydGlmaWNhdGU="}},
		{"a client's own header is replaced", &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}, []string{"X-Client-Cert", "forged"}, []string{"SSdtIGEgY2VydGlmaWNhdGU="}},
		{"without a certificate a client's own header is removed", &tls.ConnectionState{}, []string{"X-Client-Cert", "forged"}, nil},
		{"plain HTTP removes it too", nil, []string{"x-client-cert", "forged"}, nil},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			in := newReq("GET", "/", c.hdr...)
			in.TLS = c.tls
			out := rewrite(t, []map[string]string{{"ClientCert": "X-Client-Cert"}}, "", in)
			if got := out.Header["X-Client-Cert"]; !reflect.DeepEqual(got, c.want) {
				t.Errorf("X-Client-Cert = %q, want %q", got, c.want)
			}
		})
	}
}

func respond(t *testing.T, dicts []map[string]string, status int, hdr http.Header) http.Header {
	t.Helper()
	tf, errs := Compile("T", dicts)
	if errs != nil {
		t.Fatal(errs)
	}
	resp := &http.Response{StatusCode: status, Header: hdr, Body: http.NoBody}
	tf.ApplyResponse(resp)
	return resp.Header
}

func TestResponseHeadersCopy(t *testing.T) {
	backend := func() http.Header {
		return http.Header{"Content-Type": {"text/plain"}, "Server": {"b"}, "X-A": {"1"}}
	}
	cases := []struct {
		desc   string
		dicts  []map[string]string
		status int
		want   http.Header
	}{
		{"true copies everything", []map[string]string{{"ResponseHeadersCopy": "true"}}, 200, backend()},
		{"false copies nothing", []map[string]string{{"ResponseHeadersCopy": "false"}}, 200, http.Header{}},
		{"false keeps what transforms set", []map[string]string{{"ResponseHeadersCopy": "false"}, {"ResponseHeader": "X-B", "Set": "v"}}, 200, http.Header{"X-B": {"v"}}},
		{"false: Append still finds the backend's value, as in YARP", []map[string]string{{"ResponseHeadersCopy": "false"}, {"ResponseHeader": "X-A", "Append": "2"}}, 200, http.Header{"X-A": {"1", "2"}}},
		{"false on an upgrade keeps Connection and Upgrade", []map[string]string{{"ResponseHeadersCopy": "false"}}, 101, http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			h := backend()
			if c.status == 101 {
				h = http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "X-A": {"1"}}
			}
			if got := respond(t, c.dicts, c.status, h); !reflect.DeepEqual(got, c.want) {
				t.Errorf("headers %v, want %v", got, c.want)
			}
		})
	}
}

func TestResponseHeadersAllowed(t *testing.T) {
	cases := []struct {
		desc  string
		dicts []map[string]string
		want  http.Header
	}{
		{"only the listed headers reach the client", []map[string]string{{"ResponseHeadersAllowed": "header1;Header2"}}, http.Header{"Header1": {"value1"}, "Header2": {"value2"}}},
		{"a header set before the list is kept and merged", []map[string]string{{"ResponseHeader": "Header1", "Set": "mine"}, {"ResponseHeadersAllowed": "Header1"}}, http.Header{"Header1": {"mine", "value1"}}},
		{"an empty list lets nothing through", []map[string]string{{"ResponseHeadersAllowed": ""}}, http.Header{}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			h := http.Header{"Header1": {"value1"}, "Header2": {"value2"}, "Anotherheader": {"AnotherValue"}}
			if got := respond(t, c.dicts, 200, h); !reflect.DeepEqual(got, c.want) {
				t.Errorf("headers %v, want %v", got, c.want)
			}
		})
	}
}

// wireBody plays the transport: at EOF it fills resp.Trailer with what the
// backend sent, as net/http's Transport does.
type wireBody struct {
	r    io.Reader
	resp *http.Response
	wire http.Header
}

func (b *wireBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		if b.resp.Trailer == nil {
			b.resp.Trailer = http.Header{}
		}
		for k, v := range b.wire {
			b.resp.Trailer[k] = v
		}
	}
	return n, err
}

func (b *wireBody) Close() error { return nil }

// trailers runs the route's transforms on a response whose backend
// announced and sent wire; it returns the declared trailer names and the
// trailers after the body was read and closed.
func trailers(t *testing.T, dicts []map[string]string, status int, wire http.Header) (declared []string, got http.Header) {
	t.Helper()
	tf, errs := Compile("T", dicts)
	if errs != nil {
		t.Fatal(errs)
	}
	resp := &http.Response{StatusCode: status, Header: http.Header{}, Trailer: http.Header{}}
	for k := range wire {
		resp.Trailer[k] = nil
	}
	resp.Body = &wireBody{r: strings.NewReader("body"), resp: resp, wire: wire}
	tf.ApplyResponse(resp)
	for k := range resp.Trailer {
		declared = append(declared, k)
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return declared, resp.Trailer
}

func TestResponseTrailer(t *testing.T) {
	cases := []struct {
		desc   string
		dict   map[string]string
		status int
		want   http.Header
	}{
		{"Set replaces the backend's trailer", map[string]string{"ResponseTrailer": "x-t", "Set": "v"}, 200, http.Header{"X-T": {"v"}, "Grpc-Status": {"0"}}},
		{"Append adds a value", map[string]string{"ResponseTrailer": "X-T", "Append": "v"}, 200, http.Header{"X-T": {"wire", "v"}, "Grpc-Status": {"0"}}},
		{"a new trailer is added", map[string]string{"ResponseTrailer": "X-New", "Set": "n"}, 200, http.Header{"X-T": {"wire"}, "Grpc-Status": {"0"}, "X-New": {"n"}}},
		{"the default When skips failures", map[string]string{"ResponseTrailer": "X-New", "Set": "n"}, 500, http.Header{"X-T": {"wire"}, "Grpc-Status": {"0"}}},
		{"When Failure applies to failures", map[string]string{"ResponseTrailer": "X-New", "Set": "n", "When": "Failure"}, 503, http.Header{"X-T": {"wire"}, "Grpc-Status": {"0"}, "X-New": {"n"}}},
		{"When Always applies to successes", map[string]string{"ResponseTrailer": "X-New", "Set": "n", "When": "Always"}, 200, http.Header{"X-T": {"wire"}, "Grpc-Status": {"0"}, "X-New": {"n"}}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			_, got := trailers(t, []map[string]string{c.dict}, c.status, http.Header{"X-T": {"wire"}, "Grpc-Status": {"0"}})
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("trailers %v, want %v", got, c.want)
			}
		})
	}
}

func TestResponseTrailerRemove(t *testing.T) {
	cases := []struct {
		desc   string
		dict   map[string]string
		status int
		want   http.Header
	}{
		{"removes on success by default", map[string]string{"ResponseTrailerRemove": "X-T"}, 200, http.Header{"Grpc-Status": {"0"}}},
		{"the default When keeps it on failure", map[string]string{"ResponseTrailerRemove": "X-T"}, 500, http.Header{"X-T": {"wire"}, "Grpc-Status": {"0"}}},
		{"When Failure removes on failure", map[string]string{"ResponseTrailerRemove": "x-t", "When": "Failure"}, 404, http.Header{"Grpc-Status": {"0"}}},
		{"When Always removes on success", map[string]string{"ResponseTrailerRemove": "X-T", "When": "Always"}, 200, http.Header{"Grpc-Status": {"0"}}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			declared, got := trailers(t, []map[string]string{c.dict}, c.status, http.Header{"X-T": {"wire"}, "Grpc-Status": {"0"}})
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("trailers %v, want %v", got, c.want)
			}
			if _, ok := got["X-T"]; !ok && strings.Contains(strings.Join(declared, ","), "X-T") {
				t.Errorf("a removed trailer is still declared: %v", declared)
			}
		})
	}
}

func TestResponseTrailersAllowed(t *testing.T) {
	wire := http.Header{"Header1": {"value1"}, "Header2": {"value2"}, "Anotherheader": {"AnotherValue"}}
	cases := []struct {
		desc  string
		dicts []map[string]string
		want  http.Header
	}{
		{"only the listed trailers reach the client", []map[string]string{{"ResponseTrailersAllowed": "header1;Header2"}}, http.Header{"Header1": {"value1"}, "Header2": {"value2"}}},
		{"an empty list lets nothing through", []map[string]string{{"ResponseTrailersAllowed": ""}}, http.Header{}},
		{"a trailer set after the list is added", []map[string]string{{"ResponseTrailersAllowed": "Header1"}, {"ResponseTrailer": "X-New", "Set": "n"}}, http.Header{"Header1": {"value1"}, "X-New": {"n"}}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			declared, got := trailers(t, c.dicts, 200, wire)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("trailers %v, want %v", got, c.want)
			}
			if len(declared) != len(c.want) {
				t.Errorf("declared %v, want the keys of %v", declared, c.want)
			}
		})
	}
}

func TestResponseTrailersCopy(t *testing.T) {
	wire := http.Header{"X-T": {"wire"}}
	cases := []struct {
		desc  string
		dicts []map[string]string
		want  http.Header
	}{
		{"true copies the backend's trailers", []map[string]string{{"ResponseTrailersCopy": "true"}}, http.Header{"X-T": {"wire"}}},
		{"false copies none", []map[string]string{{"ResponseTrailersCopy": "false"}}, http.Header{}},
		{"false keeps what transforms set", []map[string]string{{"ResponseTrailersCopy": "false"}, {"ResponseTrailer": "X-New", "Set": "n"}}, http.Header{"X-New": {"n"}}},
		{"false: Append still finds the backend's value, as in YARP", []map[string]string{{"ResponseTrailersCopy": "false"}, {"ResponseTrailer": "X-T", "Append": "2"}}, http.Header{"X-T": {"wire", "2"}}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			_, got := trailers(t, c.dicts, 200, wire)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("trailers %v, want %v", got, c.want)
			}
		})
	}
}

func TestNewTransformCompileErrors(t *testing.T) {
	cases := []struct {
		desc, msg string
		dict      map[string]string
	}{
		{"PathPattern must start with '/'", "must start with '/'", map[string]string{"PathPattern": "v2/{x}"}},
		{"PathPattern must be a valid template", "PathPattern", map[string]string{"PathPattern": "/{a"}},
		{"QueryRouteParameter needs a route value name", "route value name required", map[string]string{"QueryRouteParameter": "z", "Set": ""}},
		{"HttpMethodChange needs Set", "Set (the new method) is required", map[string]string{"HttpMethodChange": "PUT"}},
		{"HttpMethodChange needs a token", "not a valid HTTP method", map[string]string{"HttpMethodChange": "PUT", "Set": "PO ST"}},
		{"RequestHeadersAllowed names must be header names", "not a valid header name", map[string]string{"RequestHeadersAllowed": "ok;bad name"}},
		{"ResponseTrailer needs Set or Append", "exactly one of Set or Append", map[string]string{"ResponseTrailer": "X"}},
		{"ResponseTrailerRemove When is checked", "Sometimes", map[string]string{"ResponseTrailerRemove": "X", "When": "Sometimes"}},
		{"ClientCert needs a header name", "not a valid header name", map[string]string{"ClientCert": "X Cert"}},
		{"ResponseHeadersCopy wants a boolean", "not true or false", map[string]string{"ResponseHeadersCopy": "nope"}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			_, errs := Compile("R.Transforms", []map[string]string{c.dict})
			if len(errs) != 1 || errs[0].Path != "R.Transforms[0]" || !strings.Contains(errs[0].Message, c.msg) {
				t.Errorf("errors %v, want one at R.Transforms[0] containing %q", errs, c.msg)
			}
		})
	}
}

// FuzzApplyRequest drives the route-value and query transforms with
// arbitrary client paths and queries: no panic, and the outgoing path is
// always a valid escaping of itself.
func FuzzApplyRequest(f *testing.F) {
	f.Add("/api/v1/stuff/a%2Fb/c", "a=1&b=x+y&z", "/my/{plugin}/api/{**remainder}")
	f.Add("/api/%E2%82%AC/stuff/", "%zz=%&=x", "/x/{*remainder}/{plugin}.{ext?}")
	f.Add("/api/x/stuff/..%2f..", "", "/{plugin}")
	f.Add("/api/x/stuff/y", "V=1&v=2;x", "/{plugin}")
	f.Fuzz(func(t *testing.T, path, query, pattern string) {
		tf, errs := CompileRoute("F", []map[string]string{
			{"PathPattern": pattern},
			{"QueryRouteParameter": "p", "Append": "plugin"},
			{"QueryRouteParameter": "r", "Set": "remainder"},
			{"QueryValueParameter": "v", "Set": path},
			{"QueryRemoveParameter": "a"},
			{"RequestHeaderRouteValue": "X-Plugin", "Set": "remainder"},
		}, "/api/{plugin}/stuff/{**remainder}")
		if errs != nil {
			return // a pattern the template parser refuses
		}
		u, err := url.Parse(path)
		if err != nil || !strings.HasPrefix(u.Path, "/") {
			return
		}
		u.RawQuery = query
		in := &http.Request{Method: "GET", URL: u, Header: http.Header{}}
		out := &http.Request{Method: "GET", URL: &url.URL{Path: u.Path, RawPath: u.RawPath, RawQuery: query}, Header: http.Header{}}
		tf.ApplyRequest(in, out, in.Header.Clone())
		esc := out.URL.EscapedPath()
		if p, err := url.PathUnescape(esc); err != nil || p != out.URL.Path {
			t.Fatalf("path %q escapes as %q", out.URL.Path, esc)
		}
		// A ';' stays as it is, as .NET's UrlEncoder.Default leaves it
		// (Go's ParseQuery refuses it as a separator, ASP.NET reads it as
		// a plain byte): read it so here too.
		if strings.Contains(out.URL.RawQuery, "v=") {
			vals, err := url.ParseQuery(strings.ReplaceAll(out.URL.RawQuery, ";", "%3B"))
			if err != nil {
				t.Fatalf("rebuilt query %q does not parse: %v", out.URL.RawQuery, err)
			}
			var got []string // names compare case-insensitively, as ASP.NET's
			for k, vs := range vals {
				if strings.EqualFold(k, "v") {
					got = append(got, vs...)
				}
			}
			if len(got) != 1 || got[0] != path {
				t.Fatalf("rebuilt query %q carries v=%q, want %q", out.URL.RawQuery, got, path)
			}
		}
		for _, v := range out.Header["X-Plugin"] {
			if strings.ContainsAny(v, "\r\n\x00") {
				t.Fatalf("header value %q", v)
			}
		}
	})
}

func TestApplyError(t *testing.T) {
	cases := []struct {
		desc   string
		dicts  []map[string]string
		status int
		want   http.Header
	}{
		{"When Always sets on an error", []map[string]string{{"ResponseHeader": "X-A", "Set": "v", "When": "Always"}}, 502, http.Header{"X-A": {"v"}}},
		{"When Failure appends on an error", []map[string]string{{"ResponseHeader": "X-A", "Append": "v", "When": "Failure"}}, 503, http.Header{"X-A": {"v"}}},
		{"the default When skips errors", []map[string]string{{"ResponseHeader": "X-A", "Set": "v"}}, 502, http.Header{}},
		{"an allow list has nothing to copy", []map[string]string{{"ResponseHeadersAllowed": "X-A"}}, 502, http.Header{}},
		{"trailer transforms do not apply", []map[string]string{{"ResponseTrailer": "X-T", "Set": "v", "When": "Always"}}, 502, http.Header{}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			tf, errs := Compile("T", c.dicts)
			if errs != nil {
				t.Fatal(errs)
			}
			h := http.Header{}
			tf.ApplyError(h, c.status)
			if !reflect.DeepEqual(h, c.want) {
				t.Errorf("headers %v, want %v", h, c.want)
			}
		})
	}
}

func TestClientCertSurvivesALaterAllowList(t *testing.T) {
	in := newReq("GET", "/", "X-Client-Cert", "forged")
	out := rewrite(t, []map[string]string{{"ClientCert": "X-Client-Cert"}, {"RequestHeadersAllowed": "X-Client-Cert"}}, "", in)
	if got := out.Header["X-Client-Cert"]; got != nil {
		t.Errorf("X-Client-Cert = %q, want none", got)
	}
	if in.Header.Get("X-Client-Cert") != "forged" {
		t.Error("the client's own request must not change")
	}
}

func TestRequestHeaderRouteValueHost(t *testing.T) {
	cases := []struct {
		desc, target, want string
	}{
		{"a valid host from the route sets Host", "/backend.example", "backend.example"},
		{"an invalid host is not sent", "/bad%20host", ""},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			out := rewrite(t, []map[string]string{{"RequestHeaderRouteValue": "Host", "Set": "h"}}, "/{h}", newReq("GET", c.target))
			want := c.want
			if want == "" {
				want = "client.example"
			}
			if out.Host != want {
				t.Errorf("Host %q, want %q", out.Host, want)
			}
		})
	}
}
