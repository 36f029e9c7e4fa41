package frontdoor

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/tether-proxy/tether/proxy/config"
)

// redirect answers every request with a redirect built from a Redirect rule.
type redirect struct {
	scheme       string
	host         string
	port         int
	status       int
	includePath  bool
	includeQuery bool
}

func newRedirect(r *config.Redirect) (*redirect, error) {
	rd := &redirect{
		scheme:       strings.ToLower(r.Scheme),
		host:         r.Host,
		port:         r.Port,
		status:       r.StatusCode,
		includePath:  r.IncludePath == nil || *r.IncludePath,
		includeQuery: r.IncludeQueryString == nil || *r.IncludeQueryString,
	}
	if rd.status == 0 {
		rd.status = defaultRedirectStatus
	}
	switch rd.status {
	case 301, 302, 303, 307, 308:
	default:
		return nil, fmt.Errorf("StatusCode %d is not 301, 302, 303, 307 or 308", r.StatusCode)
	}
	if rd.scheme != "" && rd.scheme != "http" && rd.scheme != "https" {
		return nil, fmt.Errorf("Scheme %q is not http or https", r.Scheme)
	}
	if rd.port < 0 || rd.port > 65535 {
		return nil, fmt.Errorf("Port %d out of range", r.Port)
	}
	return rd, nil
}

func (rd *redirect) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, rd.location(r), rd.status)
}

// location builds the target URL: fields left empty keep the request's own
// value; a scheme change without a port goes to the new scheme's default.
func (rd *redirect) location(r *http.Request) string {
	reqScheme := "http"
	if r.TLS != nil {
		reqScheme = "https"
	}
	scheme := rd.scheme
	if scheme == "" {
		scheme = reqScheme
	}
	host, port := splitHostPort(r.Host)
	if rd.host != "" {
		host = rd.host
	}
	switch {
	case rd.port != 0:
		port = strconv.Itoa(rd.port)
	case scheme != reqScheme:
		port = ""
	}
	if port == "80" && scheme == "http" || port == "443" && scheme == "https" {
		port = ""
	}
	var b strings.Builder
	b.WriteString(scheme)
	b.WriteString("://")
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	b.WriteString(host)
	if port != "" {
		b.WriteString(":")
		b.WriteString(port)
	}
	if rd.includePath {
		p := r.URL.EscapedPath()
		if p == "" {
			p = "/"
		}
		b.WriteString(p)
	} else {
		b.WriteString("/")
	}
	if rd.includeQuery && r.URL.RawQuery != "" {
		b.WriteString("?")
		b.WriteString(r.URL.RawQuery)
	}
	return b.String()
}

// splitHostPort splits a Host header value; the port may be absent.
func splitHostPort(hp string) (string, string) {
	if h, p, err := net.SplitHostPort(hp); err == nil {
		return h, p
	}
	return strings.TrimSuffix(strings.TrimPrefix(hp, "["), "]"), ""
}

var _ http.Handler = (*redirect)(nil)
