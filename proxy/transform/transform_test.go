package transform

import (
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

func TestApplyRequest(t *testing.T) {
	cases := []struct {
		desc      string
		dicts     []map[string]string
		url       string
		header    http.Header
		wantPath  string
		wantRaw   string
		wantQuery string
		wantHdr   http.Header
		wantHost  string
	}{
		{desc: "PathRemovePrefix strips a leading segment prefix", dicts: []map[string]string{{"PathRemovePrefix": "/api"}}, url: "/api/users?x=1", wantPath: "/users", wantQuery: "x=1"},
		{desc: "PathRemovePrefix matches case-insensitively like ASP.NET", dicts: []map[string]string{{"PathRemovePrefix": "/API"}}, url: "/api/users", wantPath: "/users"},
		{desc: "PathRemovePrefix only removes whole segments", dicts: []map[string]string{{"PathRemovePrefix": "/api"}}, url: "/apiary/x", wantPath: "/apiary/x"},
		{desc: "PathRemovePrefix keeps escaped slashes in RawPath", dicts: []map[string]string{{"PathRemovePrefix": "/api"}}, url: "/api/a%2Fb", wantPath: "/a/b", wantRaw: "/a%2Fb"},
		{desc: "PathPrefix prepends", dicts: []map[string]string{{"PathPrefix": "/v2"}}, url: "/users", wantPath: "/v2/users"},
		{desc: "PathSet replaces the path and keeps the query", dicts: []map[string]string{{"PathSet": "/fixed"}}, url: "/users?q=1", wantPath: "/fixed", wantQuery: "q=1"},
		{desc: "RequestHeader Set replaces every value", dicts: []map[string]string{{"RequestHeader": "x-a", "Set": "v"}}, url: "/", header: http.Header{"X-A": {"old", "old2"}}, wantPath: "/", wantHdr: http.Header{"X-A": {"v"}}},
		{desc: "RequestHeader Append adds a value", dicts: []map[string]string{{"RequestHeader": "X-A", "Append": "v"}}, url: "/", header: http.Header{"X-A": {"old"}}, wantPath: "/", wantHdr: http.Header{"X-A": {"old", "v"}}},
		{desc: "RequestHeader Set with an empty value removes the header", dicts: []map[string]string{{"RequestHeader": "X-A", "Set": ""}}, url: "/", header: http.Header{"X-A": {"old"}}, wantPath: "/", wantHdr: http.Header{}},
		{desc: "RequestHeader Set Host sets the outgoing host", dicts: []map[string]string{{"RequestHeader": "Host", "Set": "example.org"}}, url: "/", wantPath: "/", wantHost: "example.org"},
		{desc: "RequestHeaderRemove deletes", dicts: []map[string]string{{"RequestHeaderRemove": "x-a"}}, url: "/", header: http.Header{"X-A": {"old"}, "X-B": {"b"}}, wantPath: "/", wantHdr: http.Header{"X-B": {"b"}}},
		{desc: "transforms run in order", dicts: []map[string]string{{"PathRemovePrefix": "/api"}, {"PathPrefix": "/internal"}}, url: "/api/x", wantPath: "/internal/x"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			tf, errs := Compile("T", c.dicts)
			if errs != nil {
				t.Fatalf("Compile: %v", errs)
			}
			u, err := url.Parse(c.url)
			if err != nil {
				t.Fatal(err)
			}
			out := &http.Request{URL: u, Header: c.header}
			if out.Header == nil {
				out.Header = http.Header{}
			}
			tf.ApplyRequest(out, out, out.Header)
			if out.URL.Path != c.wantPath || out.URL.RawPath != c.wantRaw || out.URL.RawQuery != c.wantQuery {
				t.Errorf("url = %q raw %q query %q, want %q raw %q query %q", out.URL.Path, out.URL.RawPath, out.URL.RawQuery, c.wantPath, c.wantRaw, c.wantQuery)
			}
			if c.wantHdr != nil && !reflect.DeepEqual(out.Header, c.wantHdr) {
				t.Errorf("header = %v, want %v", out.Header, c.wantHdr)
			}
			if out.Host != c.wantHost {
				t.Errorf("host = %q, want %q", out.Host, c.wantHost)
			}
		})
	}
}

func TestSharedSetValueIsNotCorruptedByAppend(t *testing.T) {
	tf, _ := Compile("T", []map[string]string{{"RequestHeader": "X-A", "Set": "v"}})
	a := &http.Request{URL: &url.URL{Path: "/"}, Header: http.Header{}}
	tf.ApplyRequest(a, a, a.Header)
	a.Header.Add("X-A", "mine")
	b := &http.Request{URL: &url.URL{Path: "/"}, Header: http.Header{}}
	tf.ApplyRequest(b, b, b.Header)
	if got := b.Header["X-A"]; !reflect.DeepEqual(got, []string{"v"}) {
		t.Fatalf("second request X-A = %v, want [v]", got)
	}
}

func TestFlags(t *testing.T) {
	cases := []struct {
		desc             string
		dicts            []map[string]string
		wantOriginalHost bool
		wantCopy         bool
	}{
		{desc: "defaults: destination host, headers copied", wantCopy: true},
		{desc: "RequestHeaderOriginalHost true keeps the client host", dicts: []map[string]string{{"RequestHeaderOriginalHost": "true"}}, wantOriginalHost: true, wantCopy: true},
		{desc: "RequestHeaderOriginalHost false", dicts: []map[string]string{{"RequestHeaderOriginalHost": "False"}}, wantCopy: true},
		{desc: "RequestHeadersCopy false stops copying", dicts: []map[string]string{{"RequestHeadersCopy": "false"}}},
		{desc: "RequestHeadersCopy true", dicts: []map[string]string{{"requestheaderscopy": "TRUE"}}, wantCopy: true},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			tf, errs := Compile("T", c.dicts)
			if errs != nil {
				t.Fatal(errs)
			}
			if tf.OriginalHost() != c.wantOriginalHost || tf.CopyRequestHeaders() != c.wantCopy {
				t.Errorf("OriginalHost %v Copy %v, want %v %v", tf.OriginalHost(), tf.CopyRequestHeaders(), c.wantOriginalHost, c.wantCopy)
			}
		})
	}
	var nilT *Transforms
	if nilT.OriginalHost() || !nilT.CopyRequestHeaders() || nilT.HasResponse() {
		t.Error("nil Transforms must report the defaults")
	}
}

func TestApplyResponse(t *testing.T) {
	cases := []struct {
		desc   string
		dicts  []map[string]string
		status int
		in     http.Header
		want   http.Header
	}{
		{desc: "ResponseHeader Set applies on success by default", dicts: []map[string]string{{"ResponseHeader": "X-A", "Set": "v"}}, status: 200, in: http.Header{"X-A": {"old"}}, want: http.Header{"X-A": {"v"}}},
		{desc: "ResponseHeader default When skips failures", dicts: []map[string]string{{"ResponseHeader": "X-A", "Set": "v"}}, status: 500, in: http.Header{}, want: http.Header{}},
		{desc: "ResponseHeader Append When Always applies to failures", dicts: []map[string]string{{"ResponseHeader": "X-A", "Append": "v", "When": "always"}}, status: 502, in: http.Header{"X-A": {"old"}}, want: http.Header{"X-A": {"old", "v"}}},
		{desc: "ResponseHeader When Failure skips successes", dicts: []map[string]string{{"ResponseHeader": "X-A", "Set": "v", "When": "Failure"}}, status: 302, in: http.Header{}, want: http.Header{}},
		{desc: "ResponseHeader When Failure applies to 4xx", dicts: []map[string]string{{"ResponseHeader": "X-A", "Set": "v", "When": "Failure"}}, status: 404, in: http.Header{}, want: http.Header{"X-A": {"v"}}},
		{desc: "ResponseHeaderRemove removes on success", dicts: []map[string]string{{"ResponseHeaderRemove": "Server"}}, status: 200, in: http.Header{"Server": {"x"}}, want: http.Header{}},
		{desc: "ResponseHeaderRemove When Failure keeps it on success", dicts: []map[string]string{{"ResponseHeaderRemove": "Server", "When": "Failure"}}, status: 200, in: http.Header{"Server": {"x"}}, want: http.Header{"Server": {"x"}}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			tf, errs := Compile("T", c.dicts)
			if errs != nil {
				t.Fatal(errs)
			}
			if !tf.HasResponse() {
				t.Fatal("HasResponse false")
			}
			resp := &http.Response{StatusCode: c.status, Header: c.in}
			tf.ApplyResponse(resp)
			if !reflect.DeepEqual(resp.Header, c.want) {
				t.Errorf("header = %v, want %v", resp.Header, c.want)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	cases := []struct {
		desc     string
		dicts    []map[string]string
		wantPath string
		wantMsg  string
	}{
		{desc: "unknown transform is named", dicts: []map[string]string{{"PathRemovePrefix": "/a"}, {"Bogus": "x"}}, wantPath: "R.Transforms[1]", wantMsg: "unknown transform"},
		{desc: "two transforms in one dictionary", dicts: []map[string]string{{"PathSet": "/a", "PathPrefix": "/b"}}, wantPath: "R.Transforms[0]", wantMsg: "one transform per dictionary"},
		{desc: "path must start with a slash", dicts: []map[string]string{{"PathPrefix": "v2"}}, wantPath: "R.Transforms[0]", wantMsg: "must start with '/'"},
		{desc: "RequestHeader needs Set or Append", dicts: []map[string]string{{"RequestHeader": "X-A"}}, wantPath: "R.Transforms[0]", wantMsg: "exactly one of Set or Append"},
		{desc: "RequestHeader rejects both Set and Append", dicts: []map[string]string{{"RequestHeader": "X-A", "Set": "a", "Append": "b"}}, wantPath: "R.Transforms[0]", wantMsg: "exactly one of Set or Append"},
		{desc: "invalid header name", dicts: []map[string]string{{"RequestHeaderRemove": "bad name"}}, wantPath: "R.Transforms[0]", wantMsg: "not a valid header name"},
		{desc: "header value with CRLF", dicts: []map[string]string{{"ResponseHeader": "X-A", "Set": "a\r\nb"}}, wantPath: "R.Transforms[0]", wantMsg: "invalid value"},
		{desc: "bad When", dicts: []map[string]string{{"ResponseHeader": "X-A", "Set": "a", "When": "Sometimes"}}, wantPath: "R.Transforms[0]", wantMsg: "Sometimes"},
		{desc: "When is not allowed on request transforms", dicts: []map[string]string{{"RequestHeader": "X-A", "Set": "a", "When": "Always"}}, wantPath: "R.Transforms[0]", wantMsg: "unexpected key"},
		{desc: "bad boolean", dicts: []map[string]string{{"RequestHeaderOriginalHost": "yes please"}}, wantPath: "R.Transforms[0]", wantMsg: "not true or false"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			tf, errs := Compile("R.Transforms", c.dicts)
			if tf != nil || len(errs) != 1 {
				t.Fatalf("Compile = %v, %v; want one error", tf, errs)
			}
			if errs[0].Path != c.wantPath || !strings.Contains(errs[0].Message, c.wantMsg) {
				t.Errorf("error = %q; want path %q containing %q", errs[0].Error(), c.wantPath, c.wantMsg)
			}
		})
	}
}

func FuzzCompile(f *testing.F) {
	f.Add("PathRemovePrefix", "/api", "", "")
	f.Add("RequestHeader", "X-A", "Set", "v")
	f.Add("ResponseHeader", "X-A", "When", "Failure")
	f.Add("Bogus", "\r\n", "Append", "x")
	f.Add("PathPattern", "/my/{plugin}/{**rest}", "", "")
	f.Add("QueryValueParameter", "a", "Set", "x y")
	f.Add("ResponseTrailer", "X-T", "Append", "v")
	f.Add("RequestHeadersAllowed", "a;b; c", "", "")
	f.Add("HttpMethodChange", "GET", "Set", "POST")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		d := map[string]string{k1: v1}
		if k2 != "" {
			d[k2] = v2
		}
		tf, errs := Compile("F", []map[string]string{d})
		if (tf == nil) == (errs == nil) {
			t.Fatalf("Compile must return exactly one of transforms or errors")
		}
		if tf != nil {
			in := &http.Request{Method: "GET", URL: &url.URL{Path: "/a/b", RawPath: "/a%2Fb", RawQuery: "a=1&b"}, Header: http.Header{"X-A": {"1"}}}
			out := &http.Request{Method: "GET", URL: &url.URL{Path: "/a/b", RawPath: "/a%2Fb", RawQuery: "a=1&b"}, Header: http.Header{}}
			tf.ApplyRequest(in, out, in.Header.Clone())
			resp := &http.Response{StatusCode: 200, Header: http.Header{"X-A": {"1"}}, Trailer: http.Header{"X-T": nil},
				Body: io.NopCloser(strings.NewReader("x"))}
			tf.ApplyResponse(resp)
			_ = resp.Body.Close()
		}
	})
}

func TestForwardedTransformsAreLeftToTheForwardedHeaders(t *testing.T) {
	tf, errs := Compile("T", []map[string]string{{"X-Forwarded": "Set"}, {"Forwarded": "for"}, {"PathPrefix": "/p"}})
	if errs != nil {
		t.Fatalf("Compile: %v", errs)
	}
	out := &http.Request{URL: &url.URL{Path: "/x", RawQuery: "a=1"}, Header: http.Header{}}
	tf.ApplyRequest(out, out, out.Header)
	if out.URL.Path != "/p/x" || out.URL.RawQuery != "a=1" {
		t.Fatalf("url = %v", out.URL)
	}
}
