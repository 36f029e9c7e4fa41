package affinity

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
)

type securePolicy int

const (
	secureSameAsRequest securePolicy = iota
	secureAlways
	secureNone
)

// cookieAttrs is SessionAffinity.Cookie, turned at New into the fixed parts
// of the Set-Cookie header. Attributes follow ASP.NET's order and spelling
// (what YARP sends): name=value; expires; max-age; domain; path; secure;
// samesite; httponly.
type cookieAttrs struct {
	expiration time.Duration
	// mid is "; max-age=..; domain=..; path=.." (the part after expires).
	mid    string
	secure securePolicy
	// tail is "; samesite=..; httponly" as configured.
	tail string
}

func parseCookieAttrs(c config.SessionAffinityCookie) (cookieAttrs, []config.FieldError) {
	var (
		a    cookieAttrs
		errs []config.FieldError
		mid  strings.Builder
		tail strings.Builder
	)
	bad := func(field, msg string) { errs = append(errs, config.FieldError{Path: field, Message: msg}) }

	if c.Expiration.Duration < 0 {
		bad("Expiration", "must not be negative")
	}
	a.expiration = c.Expiration.Duration
	switch {
	case c.MaxAge.Duration < 0:
		bad("MaxAge", "must not be negative")
	case c.MaxAge.Duration > 0:
		mid.WriteString("; max-age=" + strconv.FormatInt(int64(c.MaxAge.Duration/time.Second), 10))
	}
	if c.Domain != "" {
		if !attrSafe(c.Domain) || strings.ContainsAny(c.Domain, " ,") {
			bad("Domain", "invalid cookie domain "+strconv.Quote(c.Domain))
		}
		mid.WriteString("; domain=" + c.Domain)
	}
	path := c.Path
	if path == "" {
		path = "/"
	}
	if !attrSafe(path) {
		bad("Path", "invalid cookie path "+strconv.Quote(path))
	}
	mid.WriteString("; path=" + path)
	a.mid = mid.String()

	switch {
	case c.SecurePolicy == "" || strings.EqualFold(c.SecurePolicy, "SameAsRequest"):
		a.secure = secureSameAsRequest
	case strings.EqualFold(c.SecurePolicy, "Always"):
		a.secure = secureAlways
	case strings.EqualFold(c.SecurePolicy, "None"):
		a.secure = secureNone
	default:
		bad("SecurePolicy", "unknown secure policy "+strconv.Quote(c.SecurePolicy)+" (want SameAsRequest, Always or None)")
	}

	switch {
	case c.SameSite == "" || strings.EqualFold(c.SameSite, "Unspecified"):
		// Unspecified: no attribute, the browser's default applies.
	case strings.EqualFold(c.SameSite, "None"):
		tail.WriteString("; samesite=none")
	case strings.EqualFold(c.SameSite, "Lax"):
		tail.WriteString("; samesite=lax")
	case strings.EqualFold(c.SameSite, "Strict"):
		tail.WriteString("; samesite=strict")
	default:
		bad("SameSite", "unknown SameSite mode "+strconv.Quote(c.SameSite)+" (want Unspecified, None, Lax or Strict)")
	}
	if c.HttpOnly == nil || *c.HttpOnly {
		tail.WriteString("; httponly")
	}
	a.tail = tail.String()
	// IsEssential is accepted for YARP compatibility: tether enforces no
	// cookie consent, so it has no effect.
	return a, errs
}

// setCookie is the Set-Cookie header value carrying the affinity key.
func (p *impl) setCookie(value string, secure bool, now time.Time) string {
	var b strings.Builder
	b.Grow(len(p.name) + len(value) + len(p.cookie.mid) + len(p.cookie.tail) + 48)
	b.WriteString(p.name)
	b.WriteByte('=')
	b.WriteString(value)
	if p.cookie.expiration > 0 {
		b.WriteString("; expires=")
		b.WriteString(now.Add(p.cookie.expiration).UTC().Format(http.TimeFormat))
	}
	b.WriteString(p.cookie.mid)
	if p.cookie.secure == secureAlways || p.cookie.secure == secureSameAsRequest && secure {
		b.WriteString("; secure")
	}
	b.WriteString(p.cookie.tail)
	return b.String()
}

// attrSafe reports whether s can be a cookie attribute value: no control
// characters and no ';'.
func attrSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c == ';' {
			return false
		}
	}
	return true
}
