package route

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// constraint is one compiled inline route constraint ("int", "min(1)").
type constraint struct {
	ok func(v string) bool
	// absentOK is the answer when the parameter has no value at all (an
	// empty catch-all): ASP.NET's constraints reject a missing value, except
	// nonfile, whose purpose is to exclude file names.
	absentOK bool
}

// newConstraint compiles one constraint's text, "name" or "name(args)", as
// ASP.NET's DefaultInlineConstraintResolver reads it: names are
// case-insensitive; a constraint with one parameter gets the whole argument
// text, one with several gets it split on ',' and trimmed; numbers are
// parsed as .NET's long.Parse does (invariant culture, surrounding white
// space and a sign allowed).
func newConstraint(text string) (constraint, error) {
	name, args, hasArgs := strings.Cut(text, "(")
	if hasArgs {
		if !strings.HasSuffix(args, ")") {
			return constraint{}, fmt.Errorf("constraint %q: missing ')'", text)
		}
		args = args[:len(args)-1]
	}
	name = strings.ToLower(name)
	if simple, ok := simpleConstraints[name]; ok {
		if hasArgs {
			return constraint{}, fmt.Errorf("constraint %q takes no arguments", text)
		}
		return constraint{ok: simple, absentOK: name == "nonfile"}, nil
	}
	ints := func(n int) ([]int64, error) {
		if !hasArgs {
			return nil, fmt.Errorf("constraint %q needs %d integer argument(s)", text, n)
		}
		parts := []string{args}
		if n > 1 {
			parts = strings.Split(args, ",")
		}
		if len(parts) != n {
			return nil, fmt.Errorf("constraint %q needs %d integer argument(s)", text, n)
		}
		out := make([]int64, n)
		for i, p := range parts {
			v, ok := parseInteger(p, 64)
			if !ok {
				return nil, fmt.Errorf("constraint %q: argument %q is not an integer", text, p)
			}
			out[i] = v
		}
		return out, nil
	}
	// length(n) and length(a,b) are two constructors: pick by argument count.
	count := 1
	switch {
	case name == "range", name == "length" && strings.Contains(args, ","):
		count = 2
	}
	switch name {
	case "min", "max", "range":
		a, err := ints(count)
		if err != nil {
			return constraint{}, err
		}
		lo, hi := int64(-1<<63), int64(1<<63-1)
		switch name {
		case "min":
			lo = a[0]
		case "max":
			hi = a[0]
		default:
			if a[0] > a[1] {
				return constraint{}, fmt.Errorf("constraint %q: min %d is greater than max %d", text, a[0], a[1])
			}
			lo, hi = a[0], a[1]
		}
		return constraint{ok: func(v string) bool {
			n, ok := parseInteger(v, 64)
			return ok && lo <= n && n <= hi
		}}, nil
	case "length", "minlength", "maxlength":
		a, err := ints(count)
		if err != nil {
			return constraint{}, err
		}
		lo, hi := int64(0), int64(1<<31-1)
		switch {
		case name == "minlength":
			lo = a[0]
		case name == "maxlength":
			hi = a[0]
		case count == 1:
			lo, hi = a[0], a[0]
		default:
			lo, hi = a[0], a[1]
		}
		if lo < 0 || hi < 0 || lo > hi || hi > 1<<31-1 {
			return constraint{}, fmt.Errorf("constraint %q: lengths must be 0..2147483647, min not above max", text)
		}
		return constraint{ok: func(v string) bool {
			n := int64(utf16Len(v))
			return lo <= n && n <= hi
		}}, nil
	case "regex":
		if !hasArgs {
			return constraint{}, fmt.Errorf("constraint %q needs a pattern", text)
		}
		// ASP.NET: RegexOptions.IgnoreCase | CultureInvariant, IsMatch,
		// so the pattern is unanchored unless it anchors itself.
		re, err := regexp.Compile("(?i)" + args)
		if err != nil {
			return constraint{}, fmt.Errorf("constraint %q: invalid pattern: %v", text, err)
		}
		return constraint{ok: re.MatchString}, nil
	}
	return constraint{}, fmt.Errorf("unknown constraint %q", text)
}

// simpleConstraints are the constraints without arguments.
var simpleConstraints = map[string]func(string) bool{
	"int":      func(v string) bool { _, ok := parseInteger(v, 32); return ok },
	"long":     func(v string) bool { _, ok := parseInteger(v, 64); return ok },
	"bool":     isBool,
	"guid":     isGUID,
	"alpha":    isAlpha,
	"required": func(v string) bool { return v != "" },
	"decimal":  isDecimal,
	"double":   isFloat,
	"float":    isFloat,
	"datetime": isDateTime,
	"file":     isFileName,
	"nonfile":  func(v string) bool { return !isFileName(v) },
}

// isNetWhite is the white space .NET's number parsing skips.
func isNetWhite(c byte) bool { return c == ' ' || '\t' <= c && c <= '\r' }

// trimNumber removes the white space NumberStyles.AllowLeadingWhite and
// AllowTrailingWhite skip, and trailing NULs, which .NET ignores too.
func trimNumber(v string) string {
	for v != "" && isNetWhite(v[0]) {
		v = v[1:]
	}
	for v != "" && (isNetWhite(v[len(v)-1]) || v[len(v)-1] == 0) {
		v = v[:len(v)-1]
	}
	return v
}

// parseInteger is .NET's TryParse with NumberStyles.Integer and the
// invariant culture, for a signed integer of the given bit size: optional
// white space, one optional sign, at least one ASCII digit. It does not
// allocate (strconv does on errors).
func parseInteger(v string, bits uint) (int64, bool) {
	v = trimNumber(v)
	neg := false
	if v != "" && (v[0] == '+' || v[0] == '-') {
		neg, v = v[0] == '-', v[1:]
	}
	if v == "" {
		return 0, false
	}
	limit := uint64(1)<<(bits-1) - 1 // the largest positive value
	if neg {
		limit++
	}
	var n uint64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (limit-uint64(c-'0'))/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if neg {
		return -int64(n-1) - 1, true
	}
	return int64(n), true
}

// isBool is .NET's bool.TryParse: "true" or "false" in any case, with
// surrounding white space.
func isBool(v string) bool {
	v = strings.TrimRightFunc(strings.TrimSpace(v), func(r rune) bool { return r == 0 || unicode.IsSpace(r) })
	return strings.EqualFold(v, "true") || strings.EqualFold(v, "false")
}

// isAlpha is ASP.NET's ^[A-Za-z]*$.
func isAlpha(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i] | 0x20; c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

// isGUID is .NET's Guid.TryParse for the "D", "N", "B" and "P" formats,
// with surrounding white space.
func isGUID(v string) bool {
	v = strings.TrimSpace(v)
	if len(v) == 38 && (v[0] == '{' && v[37] == '}' || v[0] == '(' && v[37] == ')') {
		v = v[1:37]
	}
	hex := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '-' && len(v) == 36 && (i == 8 || i == 13 || i == 18 || i == 23):
		case '0' <= c && c <= '9', 'a' <= c|0x20 && c|0x20 <= 'f':
			hex++
		default:
			return false
		}
	}
	return hex == 32 && (len(v) == 32 || len(v) == 36)
}

// number scans .NET's number syntax (invariant culture): white space, a
// leading sign (or, with trailingSign, a trailing one), digits with ','
// group separators after the first digit, an optional '.' fraction and,
// with exp, an exponent. It returns the integer digits (with separators)
// for range checks.
func number(v string, exp, trailingSign bool) (intPart string, ok bool) {
	v = trimNumber(v)
	signed := false
	if v != "" && (v[0] == '+' || v[0] == '-') {
		signed, v = true, v[1:]
	}
	if trailingSign && !signed && v != "" && (v[len(v)-1] == '+' || v[len(v)-1] == '-') {
		v = strings.TrimRight(v[:len(v)-1], " \t\n\v\f\r")
	}
	i, digits := 0, 0
	for ; i < len(v); i++ {
		if c := v[i]; '0' <= c && c <= '9' {
			digits++
		} else if c != ',' || digits == 0 {
			break
		}
	}
	intPart = v[:i]
	if i < len(v) && v[i] == '.' {
		for i++; i < len(v) && '0' <= v[i] && v[i] <= '9'; i++ {
			digits++
		}
	}
	if digits == 0 {
		return "", false
	}
	if exp && i < len(v) && v[i]|0x20 == 'e' {
		j := i + 1
		if j < len(v) && (v[j] == '+' || v[j] == '-') {
			j++
		}
		k := j
		for k < len(v) && '0' <= v[k] && v[k] <= '9' {
			k++
		}
		if k > j {
			i = k
		}
	}
	return intPart, i == len(v)
}

// isFloat is .NET's double.TryParse (and float.TryParse: both overflow to
// infinity since .NET Core 3.0) with NumberStyles.Float | AllowThousands,
// including the invariant "Infinity" and "NaN" symbols.
func isFloat(v string) bool {
	if _, ok := number(v, true, false); ok {
		return true
	}
	v = trimNumber(v)
	if v != "" && (v[0] == '+' || v[0] == '-') {
		v = v[1:]
	}
	return strings.EqualFold(v, "infinity") || strings.EqualFold(v, "nan")
}

// isDecimal is .NET's decimal.TryParse with NumberStyles.Number: no
// exponent, a trailing sign allowed, and the integer part within
// decimal.MaxValue.
func isDecimal(v string) bool {
	intPart, ok := number(v, false, true)
	if !ok {
		return false
	}
	const max = "79228162514264337593543950335"
	n, cmp := 0, 0
	for i := 0; i < len(intPart); i++ {
		c := intPart[i]
		if c == ',' || c == '0' && n == 0 {
			continue
		}
		if n >= len(max) {
			return false
		}
		if cmp == 0 {
			cmp = int(c) - int(max[n])
		}
		n++
	}
	return n < len(max) || cmp <= 0
}

// isFileName is ASP.NET's FileNameRouteConstraint: the text after the last
// '/' contains a '.' followed by something other than dots.
func isFileName(v string) bool {
	if i := strings.LastIndexByte(v, '/'); i >= 0 {
		v = v[i+1:]
	}
	i := strings.IndexByte(v, '.')
	if i < 0 {
		return false
	}
	return strings.TrimLeft(v[i+1:], ".") != ""
}

// utf16Len is len(v) as .NET counts a string: in UTF-16 code units.
func utf16Len(v string) int {
	n := 0
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		i += size
		n++
		if r >= 0x10000 {
			n++
		}
	}
	return n
}

// isDateTime accepts the forms listed in doc.go: ISO 8601 / RFC 3339
// dates and date-times, and the invariant culture's M/d/yyyy, each with
// surrounding white space. .NET's DateTime.TryParse accepts many more
// (month names, other separators); those do not match here.
func isDateTime(v string) bool {
	v = strings.TrimSpace(v)
	var y, mo, d int
	var ok bool
	if yy, r, ok4 := digits(v, 4, 4); ok4 && strings.HasPrefix(r, "-") {
		y, v = yy, r
		if mo, v, ok = digits(v[1:], 2, 2); !ok || !strings.HasPrefix(v, "-") {
			return false
		}
		if d, v, ok = digits(v[1:], 2, 2); !ok {
			return false
		}
		if v != "" && (v[0] == 'T' || v[0] == 't' || v[0] == ' ') {
			if v, ok = timeOfDay(v[1:], true); !ok {
				return false
			}
		}
	} else {
		// M/d/yyyy [H:mm[:ss]]
		if mo, v, ok = digits(v, 1, 2); !ok || !strings.HasPrefix(v, "/") {
			return false
		}
		if d, v, ok = digits(v[1:], 1, 2); !ok || !strings.HasPrefix(v, "/") {
			return false
		}
		if y, v, ok = digits(v[1:], 4, 4); !ok {
			return false
		}
		if strings.HasPrefix(v, " ") {
			if v, ok = timeOfDay(v[1:], false); !ok {
				return false
			}
		}
	}
	return v == "" && y >= 1 && 1 <= mo && mo <= 12 && 1 <= d && d <= daysIn(y, mo)
}

// timeOfDay reads H:mm[:ss[.fffffff]], then, when zone, an optional "Z" or
// ±hh[:mm] offset; it returns what is left.
func timeOfDay(v string, zone bool) (string, bool) {
	h, v, ok := digits(v, 1, 2)
	if !ok || h > 23 || !strings.HasPrefix(v, ":") {
		return v, false
	}
	m, v, ok := digits(v[1:], 2, 2)
	if !ok || m > 59 {
		return v, false
	}
	if strings.HasPrefix(v, ":") {
		var s int
		if s, v, ok = digits(v[1:], 2, 2); !ok || s > 59 {
			return v, false
		}
		if strings.HasPrefix(v, ".") || strings.HasPrefix(v, ",") {
			if _, v, ok = digits(v[1:], 1, 50); !ok {
				return v, false
			}
		}
	}
	if !zone || v == "" {
		return v, true
	}
	if v[0] == 'Z' || v[0] == 'z' {
		return v[1:], true
	}
	if v[0] != '+' && v[0] != '-' {
		return v, false
	}
	if h, v, ok = digits(v[1:], 2, 2); !ok || h > 14 {
		return v, false
	}
	if strings.HasPrefix(v, ":") {
		if m, v, ok = digits(v[1:], 2, 2); !ok || m > 59 {
			return v, false
		}
	}
	return v, true
}

// digits reads min..max ASCII digits from the start of v.
func digits(v string, min, max int) (n int, rest string, ok bool) {
	i := 0
	for ; i < len(v) && i < max && '0' <= v[i] && v[i] <= '9'; i++ {
		n = n*10 + int(v[i]-'0')
	}
	return n, v[i:], i >= min
}

func daysIn(y, m int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
