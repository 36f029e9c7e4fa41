package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/tether-proxy/tether/proxy/config/tree"
)

// decoder maps the generic tree onto the config types by reflection, the way
// .NET's configuration binder does: case-insensitive keys, scalars as text.
// It collects every problem instead of stopping at the first.
type decoder struct {
	errs  Errors
	warns []string
	infos []string
	// strict makes unknown keys errors (LoadOptions.Strict).
	strict bool
}

var (
	durationType    = reflect.TypeFor[Duration]()
	unsupportedType = reflect.TypeFor[Unsupported]()
	appSectionType  = reflect.TypeFor[AppSection]()
	tlsVersionsType = reflect.TypeFor[TLSVersions]()
	wafPolicyType   = reflect.TypeFor[WafPolicy]()
	minDataRateType = reflect.TypeFor[MinDataRate]()
)

// minDataRateFields are the keys of a MinDataRate object.
type minDataRateFields struct {
	BytesPerSecond *float64
	GracePeriod    Duration
}

func (d *decoder) errorf(path, format string, args ...any) {
	if path == "" {
		path = "$"
	}
	d.errs = append(d.errs, FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (d *decoder) warn(path, msg string) {
	d.warns = append(d.warns, path+": "+msg)
}

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func (d *decoder) decode(path string, n *tree.Node, v reflect.Value) {
	switch v.Type() {
	case unsupportedType:
		v.Set(reflect.ValueOf(Unsupported{Set: true}))
		d.warn(path, "accepted but not implemented by tether")
		return
	case appSectionType:
		v.Set(reflect.ValueOf(AppSection{Set: true}))
		return
	case tlsVersionsType:
		if n.Kind == tree.Null {
			return
		}
		tv, err := parseTLSVersions(n)
		if err != nil {
			d.errorf(path, "%v", err)
			return
		}
		v.Set(reflect.ValueOf(tv))
		return
	case minDataRateType:
		switch n.Kind {
		case tree.Null:
			v.Set(reflect.ValueOf(MinDataRate{Set: true, Disabled: true}))
		case tree.Object:
			var f minDataRateFields
			d.decodeStruct(path, n, reflect.ValueOf(&f).Elem())
			if f.BytesPerSecond == nil {
				d.errorf(join(path, "BytesPerSecond"), "required (null for the whole key: no minimum)")
				return
			}
			v.Set(reflect.ValueOf(MinDataRate{BytesPerSecond: *f.BytesPerSecond, GracePeriod: f.GracePeriod, Set: true}))
		default:
			d.errorf(path, "want an object {\"BytesPerSecond\": ..., \"GracePeriod\": ...} or null, got %s", n.Describe())
		}
		return
	case wafPolicyType:
		if n.Kind == tree.Scalar {
			d.wafPolicyName(path, n.Text, v)
			return
		}
	case durationType:
		// Null and "" leave the key unset, like an absent key: the default
		// applies. Anything else is Set, zero included.
		if n.Kind == tree.Null || (n.Kind == tree.Scalar && strings.TrimSpace(n.Text) == "") {
			return
		}
		if n.Kind != tree.Scalar {
			d.errorf(path, "want a duration, got %s", n.Describe())
			return
		}
		dur, days, err := parseDuration(n.Text)
		if err != nil {
			d.errorf(path, "%v", err)
			return
		}
		if days > 0 {
			secs := strings.TrimLeft(strings.TrimSpace(n.Text), "0")
			d.warn(path, fmt.Sprintf("bare number %d read as %d %s, as .NET does; write %q or %q for seconds",
				days, days, plural(days, "day", "days"), formatTimeSpan(time.Duration(days)*time.Second), secs+"s"))
		}
		v.Set(reflect.ValueOf(Duration{Duration: dur, Set: true}))
		return
	}
	if n.Kind == tree.Null {
		return // like .NET: an empty value leaves the default
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(path, n, v.Elem())
	case reflect.Struct:
		d.decodeStruct(path, n, v)
	case reflect.Map:
		d.decodeMap(path, n, v)
	case reflect.Slice:
		if n.Kind != tree.List {
			d.errorf(path, "want a list, got %s", n.Describe())
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Vals), len(n.Vals))
		for i, e := range n.Vals {
			d.decode(fmt.Sprintf("%s[%d]", path, i), e, s.Index(i))
		}
		v.Set(s)
	case reflect.String:
		if n.Kind != tree.Scalar {
			d.errorf(path, "want a string, got %s", n.Describe())
			return
		}
		v.SetString(n.Text)
	case reflect.Bool:
		switch {
		case n.Kind == tree.Scalar && strings.EqualFold(strings.TrimSpace(n.Text), "true"):
			v.SetBool(true)
		case n.Kind == tree.Scalar && strings.EqualFold(strings.TrimSpace(n.Text), "false"):
			v.SetBool(false)
		default:
			d.errorf(path, "want true or false, got %s", n.Describe())
		}
	case reflect.Float64:
		f, err := strconv.ParseFloat(strings.TrimSpace(n.Text), 64)
		if n.Kind != tree.Scalar || err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.errorf(path, "want a number, got %s", n.Describe())
			return
		}
		v.SetFloat(f)
	case reflect.Int, reflect.Int64:
		i, err := strconv.ParseInt(strings.TrimSpace(n.Text), 10, v.Type().Bits())
		if n.Kind != tree.Scalar || err != nil {
			d.errorf(path, "want an integer, got %s", n.Describe())
			return
		}
		v.SetInt(i)
	default: // a field type added to types.go without a decoder here
		d.errorf(path, "config: cannot decode into %s", v.Type())
	}
}

// checkDuplicates reports keys that differ only in case: .NET configuration
// keys are case-insensitive, so such keys would silently collide.
func (d *decoder) checkDuplicates(path string, n *tree.Node) map[int]bool {
	seen := make(map[string]string, len(n.Keys))
	dup := map[int]bool{}
	for i, k := range n.Keys {
		lk := strings.ToLower(k)
		if first, ok := seen[lk]; ok {
			d.errorf(join(path, k), "duplicate key (same as %q; keys are case-insensitive)", first)
			dup[i] = true
			continue
		}
		seen[lk] = k
	}
	return dup
}

func (d *decoder) decodeStruct(path string, n *tree.Node, v reflect.Value) {
	if n.Kind != tree.Object {
		d.errorf(path, "want an object, got %s", n.Describe())
		return
	}
	dup := d.checkDuplicates(path, n)
	t := v.Type()
	for i, k := range n.Keys {
		if dup[i] {
			continue
		}
		f, ok := t.FieldByNameFunc(func(name string) bool { return strings.EqualFold(name, k) })
		if !ok || !f.IsExported() || f.Anonymous {
			d.unknownKey(path, k, n.Vals[i], t)
			continue
		}
		d.decode(join(path, f.Name), n.Vals[i], v.FieldByIndex(f.Index))
	}
}

func (d *decoder) decodeMap(path string, n *tree.Node, v reflect.Value) {
	if n.Kind != tree.Object {
		d.errorf(path, "want an object, got %s", n.Describe())
		return
	}
	dup := d.checkDuplicates(path, n)
	m := reflect.MakeMapWithSize(v.Type(), len(n.Keys))
	et := v.Type().Elem()
	for i, k := range n.Keys {
		if dup[i] {
			continue
		}
		e := reflect.New(et).Elem()
		d.decode(join(path, k), n.Vals[i], e)
		if e.Kind() == reflect.Pointer && e.IsNil() {
			e.Set(reflect.New(et.Elem())) // "id": null is an empty entry, never a nil one
		}
		m.SetMapIndex(reflect.ValueOf(k), e)
	}
	v.Set(m)
}

// parseDuration reads a .NET TimeSpan ("[d.]hh:mm[:ss[.fffffff]]",
// "d:hh:mm:ss" or a bare integer of days, as TimeSpan.Parse does) or a Go
// duration ("1m30s"). days is the number read when s was a bare integer, so
// the caller can warn that it meant days.
func parseDuration(s string) (dur time.Duration, days int64, err error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return 0, 0, nil
	case strings.HasPrefix(s, "-"):
		return 0, 0, fmt.Errorf("duration %q must not be negative", s)
	case strings.Trim(s, "0123456789") == "":
		n, err := digits(s, maxDays)
		if err != nil {
			return 0, 0, fmt.Errorf("duration %q is too long (a bare number is days, at most %d)", s, maxDays)
		}
		return time.Duration(n) * 24 * time.Hour, n, nil
	case strings.Trim(s, "0123456789.") == "":
		// TimeSpan.Parse rejects "1.5" too: "d.hh" needs ":mm".
		return 0, 0, fmt.Errorf("invalid duration %q: a bare number is whole days in .NET; write a TimeSpan like 00:00:01.5 or a Go duration like 1.5s", s)
	case strings.Contains(s, ":"):
		d, err := parseTimeSpan(s)
		if err != nil {
			return 0, 0, fmt.Errorf("invalid TimeSpan %q: %v", s, err)
		}
		return d, 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, 0, fmt.Errorf("invalid duration %q (want a TimeSpan like 00:00:30 or a Go duration like 30s)", s)
	}
	if d < 0 {
		return 0, 0, fmt.Errorf("duration %q must not be negative", s)
	}
	return d, 0, nil
}

// maxDays is the most days an int64 of nanoseconds holds.
const maxDays = 106751

// formatTimeSpan writes d as .NET does: "[d.]hh:mm:ss".
func formatTimeSpan(d time.Duration) string {
	s := int64(d / time.Second)
	t := fmt.Sprintf("%02d:%02d:%02d", s/3600%24, s/60%60, s%60)
	if days := s / 86400; days > 0 {
		t = fmt.Sprintf("%d.%s", days, t)
	}
	return t
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func parseTimeSpan(s string) (time.Duration, error) {
	parts := strings.Split(s, ":")
	var days, frac string
	switch len(parts) {
	case 2, 3:
		if i := strings.IndexByte(parts[0], '.'); i >= 0 {
			days, parts[0] = parts[0][:i], parts[0][i+1:]
		}
	case 4:
		days, parts = parts[0], parts[1:]
	default:
		return 0, errors.New("want [d.]hh:mm[:ss[.fffffff]]")
	}
	if len(parts) == 3 {
		if i := strings.IndexByte(parts[2], '.'); i >= 0 {
			parts[2], frac = parts[2][:i], parts[2][i+1:]
			if frac == "" || len(frac) > 7 {
				return 0, errors.New("fraction of a second must have 1 to 7 digits")
			}
		}
	}
	total := time.Duration(0)
	if days != "" {
		n, err := digits(days, maxDays)
		if err != nil {
			return 0, fmt.Errorf("days: %v", err)
		}
		total += time.Duration(n) * 24 * time.Hour
	}
	limits := []struct {
		name string
		max  int64
		unit time.Duration
	}{{"hours", 23, time.Hour}, {"minutes", 59, time.Minute}, {"seconds", 59, time.Second}}
	for i, p := range parts {
		n, err := digits(p, limits[i].max)
		if err != nil {
			return 0, fmt.Errorf("%s: %v", limits[i].name, err)
		}
		total += time.Duration(n) * limits[i].unit
	}
	if frac != "" {
		n, err := digits(frac+strings.Repeat("0", 9-len(frac)), 999_999_999)
		if err != nil {
			return 0, fmt.Errorf("fraction: %v", err)
		}
		total += time.Duration(n)
	}
	if total < 0 {
		return 0, errors.New("too long")
	}
	return total, nil
}

// digits parses a non-empty run of ASCII digits no greater than max.
func digits(s string, max int64) (int64, error) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > max {
		return 0, fmt.Errorf("%s is out of range (0..%d)", s, max)
	}
	return n, nil
}
