package affinity

import (
	"encoding/base64"
	"net/url"
	"strings"
	"time"
)

// Yarp is the optional ASP.NET Data Protection side of the Cookie and
// CustomHeader policies (config section DataProtection, docs/YARP.md).
// With Protection set, those policies open the values a YARP fleet issued
// besides tether's own; with Issue set as well, they issue values YARP
// opens, so a mixed YARP/tether fleet serves one set of sessions during a
// migration. Other policies are unaffected.
type Yarp struct {
	Protection YarpProtection
	Issue      bool
}

// YarpProtection is ASP.NET Data Protection under the YARP application's
// discriminator (package keyring/dataprotection's Application).
type YarpProtection interface {
	Protect(purpose string, plaintext []byte) ([]byte, error)
	Unprotect(purpose string, protected []byte) ([]byte, error)
	// DefaultKeyID names the key Protect uses now, "" when there is none.
	DefaultKeyID() string
}

// yarpPurposes are the purposes YARP's policies protect with: the full
// .NET type name (BaseEncryptedSessionAffinityPolicy passes
// GetType().FullName to CreateProtector).
var yarpPurposes = map[policy]string{
	encCookie:    "Yarp.ReverseProxy.SessionAffinity.CookieSessionAffinityPolicy",
	customHeader: "Yarp.ReverseProxy.SessionAffinity.CustomHeaderSessionAffinityPolicy",
}

// yarpPrefix starts every YARP value: the base64 of Data Protection's magic
// header 09 F0 C9 F0 (version 0) and the first key id bits.
const yarpPrefix = "CfDJ8"

// yarpKeyring puts YARP's values beside tether's own. YARP's value is the
// UTF-8 key input protected under the policy's purpose, in standard base64
// with '=' trimmed; in a cookie, ASP.NET's Response.Cookies also
// percent-encodes it ('+' and '/' become %2B and %2F) and Request.Cookies
// decodes it again. Opening tries YARP first only for values that start
// with its magic header, and tether's keyring otherwise or when that fails.
// Sealing issues a YARP value when Issue is set and the ring has a default
// key, and tether's value otherwise (every tether node opens it, YARP does
// not), so a key ring without an active key never breaks stickiness among
// tether nodes.
type yarpKeyring struct {
	own     Keyring
	dp      YarpProtection
	purpose string
	cookie  bool
	issue   bool
}

func (k *yarpKeyring) Seal(purpose, plaintext []byte) (string, error) {
	if k.issue {
		if b, err := k.dp.Protect(k.purpose, plaintext); err == nil {
			v := strings.TrimRight(base64.StdEncoding.EncodeToString(b), "=")
			if k.cookie {
				v = strings.NewReplacer("+", "%2B", "/", "%2F").Replace(v)
			}
			return v, nil
		}
	}
	return k.own.Seal(purpose, plaintext)
}

func (k *yarpKeyring) Open(purpose []byte, value string) ([]byte, error) {
	if strings.HasPrefix(value, yarpPrefix) {
		if in, ok := k.openYarp(value); ok {
			return in, nil
		}
	}
	return k.own.Open(purpose, value)
}

func (k *yarpKeyring) openYarp(value string) ([]byte, bool) {
	if k.cookie && strings.IndexByte(value, '%') >= 0 {
		v, err := url.PathUnescape(value)
		if err != nil {
			return nil, false
		}
		value = v
	}
	b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(value, "="))
	if err != nil {
		return nil, false
	}
	in, err := k.dp.Unprotect(k.purpose, b)
	return in, err == nil
}

// ActiveKeyID lets keyFor reuse a sealed value while the key that sealed
// it stays the same: the Data Protection default key while issuing YARP
// values, tether's active key otherwise.
func (k *yarpKeyring) ActiveKeyID(now time.Time) string {
	if k.issue {
		if id := k.dp.DefaultKeyID(); id != "" {
			return "yarp:" + id
		}
		return ""
	}
	if ak, ok := k.own.(activeKeyer); ok {
		return ak.ActiveKeyID(now)
	}
	return ""
}

var _ activeKeyer = (*yarpKeyring)(nil)
