package h1server

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"

	"github.com/tether-proxy/tether/proxy/internal/h1wire"
	"golang.org/x/net/http/httpguts"
)

// parseRequestHead builds the request net/http's server would read from
// head, for the requests Server takes: "GET <origin-form> HTTP/1.1",
// CRLF line ends, token field names, field values of visible ASCII,
// spaces and tabs, no folded line, exactly one valid Host, a Connection
// of only "keep-alive" or "close", and none of the fields that give a
// request a body, an upgrade or an expectation. nil for anything else,
// which net/http then reads from the same bytes. It fills r, which has
// no context yet.
func parseRequestHead(head []byte, r *http.Request) bool {
	return parseRequestHeadInto(head, 0, r, nil)
}

// headScratch is what a connection's requests reuse, one after another:
// the header map, the slots of its values and the URL. A request's
// strings stay its own (one string per head); only these containers are
// refilled, once the handler of the request before has returned. head is
// the last head's string (cancelhook.Ctx.SetParsed).
type headScratch struct {
	fields h1wire.Fields
	url    url.URL
	head   string
	// host is the last head's Host, valid: a client sends the same Host
	// head after head, and one of the same text is not held to the host
	// rule again.
	host string
}

// parseRequestHeadInto is parseRequestHead with s's containers, when s is
// not nil; n is the head's h1wire.FieldLines when the scan for its end
// counted them (h1wire.HeadLines), 0 to count them here.
func parseRequestHeadInto(head []byte, n int, r *http.Request, s *headScratch) bool {
	if !bytes.HasSuffix(head, h1wire.CRLFCRLF) {
		return false // a head ended by a bare LF (headEnd allows it)
	}
	eol := bytes.IndexByte(head, '\n')
	if eol < 1 || head[eol-1] != '\r' {
		return false
	}
	line := head[:eol-1]
	const proto = " HTTP/1.1"
	if len(line) < 4+1+len(proto) || string(line[:4]) != "GET " || string(line[len(line)-len(proto):]) != proto {
		return false
	}
	target := line[4 : len(line)-len(proto)]
	if target[0] != '/' {
		return false
	}
	for _, b := range target {
		if b <= ' ' || b >= 0x7f {
			return false
		}
	}
	all := head[eol+1:]
	if n == 0 {
		n = h1wire.FieldLines(all)
	}
	if n <= 0 {
		return false // no Host
	}
	// One string holds the target and every field (one allocation).
	blk := string(head[4:])
	uri := blk[:len(target)]
	off := eol + 1 - 4 // all[i] is blk[off+i]
	var u *url.URL
	var fs *h1wire.Fields
	if s != nil {
		u, fs = &s.url, &s.fields
	} else {
		u = new(url.URL)
	}
	if !h1wire.PlainRequestURI(uri, u) {
		var err error
		if u, err = url.ParseRequestURI(uri); err != nil {
			return false
		}
	}
	h, vals := fs.Get(n)
	var host, pragma string
	hosts := 0
	// What the walk saw of Connection and Pragma, which spares a look-up
	// in h for each when the head has none.
	closing, pragmas := false, 0
	fr := h1wire.NewFieldReader(all, blk, off)
	// Until a name comes again each field is a new name: one assignment,
	// no look-up before it (AddField's). The map's size tells a repeat,
	// whose assignment replaced the name's first values: they are read
	// again from the head, and from then on each field takes AddField.
	repeated := false
	for read := 0; ; read++ {
		key, value, done, ok := fr.Next(true)
		if !ok {
			return false
		}
		if done {
			break
		}
		switch key {
		case "Content-Length", "Transfer-Encoding", "Upgrade", "Expect", "Http2-Settings", "Trailer":
			return false
		case "Host":
			hosts++
			host = value
			continue
		case "Connection":
			switch {
			case strings.EqualFold(value, "close"):
				closing = true
			case !strings.EqualFold(value, "keep-alive"):
				return false
			}
		case "Pragma":
			if pragmas++; pragmas == 1 {
				pragma = value
			}
		}
		if repeated {
			vals = h1wire.AddField(h, vals, key, value)
			continue
		}
		before := len(h)
		vals[0] = value
		h[key] = vals[:1:1]
		vals = vals[1:]
		if len(h) == before {
			repeated = true
			h[key] = append(valuesBefore(all, blk, off, read, key), value)
		}
	}
	if hosts != 1 || (s == nil || host != s.host) && !httpguts.ValidHostHeader(host) {
		return false
	}
	if pragma == "no-cache" {
		if _, ok := h["Cache-Control"]; !ok {
			h["Cache-Control"] = noCache // as net/http's fixPragmaCacheControl
		}
	}
	if s != nil {
		s.head, s.host = blk, host // the memo keeps no head but this one
	}
	*r = http.Request{
		Method: http.MethodGet, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: http.NoBody, Host: host, RequestURI: uri,
		Close: closing,
	}
	return true
}

var noCache = []string{"no-cache"}

// valuesBefore are the values of the fields named key among the first n
// fields of a head (as parseRequestHeadInto's walk reads them), in their
// order.
func valuesBefore(all []byte, blk string, off, n int, key string) []string {
	var vs []string
	fr := h1wire.NewFieldReader(all, blk, off)
	for range n {
		k, v, _, _ := fr.Next(true)
		if k == key {
			vs = append(vs, v)
		}
	}
	return vs
}
