package config

import (
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/tether-proxy/tether/proxy/config/tree"
)

// Unknown keys (docs/CONFIGURATION.md, "The configuration file"). A key that neither tether nor
// YARP nor ASP.NET defines is reported with its JSON path and the nearest
// known key, as a warning (so a file YARP loads also loads here; YARP's
// binder ignores such keys) or, with LoadOptions.Strict, as an error for CI.
//
// At the top level an appsettings.json also carries the application's own
// sections ("ConnectionStrings", "MyApp"). A top-level key within a typo's
// distance of a known one ("Listners") is treated as a typo of it; any
// other is the application's and is ignored with one info line, even when
// strict.
//
// Inside ReverseProxy a key within a typo's distance of a known one
// ("SessionAfinity") is an error even without strict: ignoring it would
// silently turn a feature off (affinity, health checks) while the file
// looks right. Keys further from any known one stay warnings, and so does a
// misspelt policy whose value is what its absence means (YARP's own sample
// has "Authorization Policy": "Anonymous"): ignoring it changes nothing.

// TopLevelKey says what a load makes of a configuration file's top-level
// key: the section of Config it names (matched case-insensitively, as
// .NET does), or else the section it is taken for a misspelling of (typo:
// a warning, an error with LoadOptions.Strict), or else "": a section of
// the application's own, ignored with an info line. "$schema", ignored
// too, is "$schema".
func TopLevelKey(key string) (section string, typo bool) {
	if strings.EqualFold(key, "$schema") {
		return "$schema", false
	}
	t := reflect.TypeFor[Config]()
	if f, ok := t.FieldByNameFunc(func(name string) bool { return strings.EqualFold(name, key) }); ok && f.IsExported() && !f.Anonymous {
		return f.Name, false
	}
	if near, dist := nearestField(key, t); near != "" && dist <= typoDistance(key) {
		return near, true
	}
	return "", false
}

// unknownKey reports key, found at path inside a value of struct type t.
func (d *decoder) unknownKey(path, key string, val *tree.Node, t reflect.Type) {
	at := join(path, key)
	near, dist := nearestField(key, t)
	if path == "" && (near == "" || dist > typoDistance(key)) {
		d.infos = append(d.infos, at+": not a tether, YARP or ASP.NET section; ignored as the application's own")
		return
	}
	if near != "" && dist <= typoDistance(key) && inReverseProxy(at) && !neutral(near, val) {
		d.errorf(at, "unknown key; did you mean %s? (a misspelt key would silently turn its feature off)", near)
		return
	}
	msg := "unknown key"
	if near != "" && dist <= suggestDistance(key) {
		msg += "; did you mean " + near + "?"
	}
	if d.strict {
		d.errorf(at, "%s", msg)
		return
	}
	d.warn(at, msg+" (ignored; --strict makes this an error)")
}

// neutralValues are, per route policy key, the values that mean what an
// absent key means.
var neutralValues = map[string][]string{
	"AuthorizationPolicy": {"Anonymous", "Default"},
	"CorsPolicy":          {"Disable", "Default"},
	"TimeoutPolicy":       {"Disable"},
	"WafPolicy":           {"Default"},
}

// neutral reports whether val, given to a misspelling of key, means what
// leaving key out means.
func neutral(key string, val *tree.Node) bool {
	if val == nil || val.Kind != tree.Scalar {
		return false
	}
	for _, n := range neutralValues[key] {
		if strings.EqualFold(strings.TrimSpace(val.Text), n) {
			return true
		}
	}
	return false
}

// inReverseProxy reports whether the JSON path at lies in the ReverseProxy
// section (keys match case-insensitively).
func inReverseProxy(at string) bool {
	const prefix = "ReverseProxy."
	return len(at) > len(prefix) && strings.EqualFold(at[:len(prefix)], prefix)
}

// typoDistance is the largest edit distance at which a top-level key is
// taken for a misspelt known section rather than an application section.
func typoDistance(key string) int {
	switch n := utf8.RuneCountInString(key); {
	case n <= 4:
		return 1
	case n <= 12:
		return 2
	default:
		return 3
	}
}

// suggestDistance bounds "did you mean" suggestions below the top level:
// far-fetched ones help nobody.
func suggestDistance(key string) int {
	return max(typoDistance(key), utf8.RuneCountInString(key)/3)
}

// nearestField is the exported field of struct type t closest to key by
// case-insensitive edit distance (ties: the first in declaration order).
func nearestField(key string, t reflect.Type) (string, int) {
	best, bestDist := "", -1
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		if dist := editDistance(strings.ToLower(key), strings.ToLower(f.Name)); bestDist < 0 || dist < bestDist {
			best, bestDist = f.Name, dist
		}
	}
	return best, bestDist
}

// editDistance is the Levenshtein distance between a and b, in runes;
// an adjacent transposition counts as one edit (Damerau), as it is the
// commonest typo.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	if len(ra) > 256 || len(rb) > 256 {
		return max(len(ra), len(rb)) // keys that long are no typo of ours
	}
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
