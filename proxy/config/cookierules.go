package config

import (
	"strings"
)

// cookieRules warns where an affinity cookie's settings would make browsers
// drop it, and says what tether sends instead (package affinity applies the
// same rules): "__Secure-" and "__Host-" names force Secure, "__Host-" also
// Path=/ and no Domain; SameSite None with SecurePolicy None gets Secure on
// HTTPS requests. Envelope and header policies set no cookie of tether's.
func (v *validator) cookieRules(path string, a *SessionAffinity) {
	if !a.Enabled || a.Policy == "CustomHeader" || strings.HasPrefix(a.Policy, "Envelope") {
		return
	}
	c, p := &a.Cookie, path+".Cookie"
	name := a.AffinityKeyName
	hasPrefix := func(pre string) bool { return len(name) >= len(pre) && strings.EqualFold(name[:len(pre)], pre) }
	warn := func(field, msg string) { v.warns = append(v.warns, p+"."+field+": "+msg) }
	switch {
	case hasPrefix("__Host-"):
		if c.SecurePolicy != "" && c.SecurePolicy != "Always" {
			warn("SecurePolicy", "the __Host- cookie name requires Secure: tether always sends it")
		}
		if c.Path != "" && c.Path != "/" {
			warn("Path", "the __Host- cookie name requires Path=/: tether sends that instead of "+c.Path)
		}
		if c.Domain != "" {
			warn("Domain", "the __Host- cookie name forbids Domain: tether sends none")
		}
	case hasPrefix("__Secure-"):
		if c.SecurePolicy != "" && c.SecurePolicy != "Always" {
			warn("SecurePolicy", "the __Secure- cookie name requires Secure: tether always sends it")
		}
	case c.SameSite == "None" && c.SecurePolicy == "None":
		warn("SecurePolicy", "browsers refuse SameSite=None without Secure: tether sends Secure on HTTPS requests")
	}
}
