package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// writeTable renders an admin answer as a readable table: a list found
// under listKey becomes rows with the given columns (dotted paths into each
// object); other fields print as "key: value" lines. Times print to the
// second (tableTime).
func writeTable(w io.Writer, v any, listKey string, columns ...string) error {
	m, _ := v.(map[string]any)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	keys := make([]string, 0, len(m))
	for k := range m {
		if k != listKey {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(tw, "%s:\t%s\n", k, cell(m[k]))
	}
	if listKey != "" {
		if len(keys) > 0 {
			fmt.Fprintln(tw)
		}
		upper := make([]string, len(columns))
		for i, c := range columns {
			upper[i] = strings.ToUpper(strings.ReplaceAll(c, ".", "_"))
		}
		fmt.Fprintln(tw, strings.Join(upper, "\t"))
		rows, _ := m[listKey].([]any)
		for _, r := range rows {
			vals := make([]string, len(columns))
			for i, c := range columns {
				vals[i] = cell(lookup(r, c))
			}
			fmt.Fprintln(tw, strings.Join(vals, "\t"))
		}
	}
	return tw.Flush()
}

// tableTime is how tables print a time: to the second, in UTC (the JSON
// answer keeps the nanoseconds).
const tableTime = "2006-01-02 15:04:05Z07:00"

// parseAPITime reads an RFC 3339 time as the admin API writes them.
func parseAPITime(s string) (time.Time, bool) {
	if len(s) < len("2006-01-02T15:04:05Z") || s[4] != '-' || s[10] != 'T' {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

func lookup(v any, path string) any {
	for _, p := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		if x == "" {
			return "-"
		}
		if t, ok := parseAPITime(x); ok {
			return t.UTC().Format(tableTime)
		}
		return x
	case float64:
		return fmt.Sprint(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = cell(e)
		}
		if len(parts) == 0 {
			return "-"
		}
		return strings.Join(parts, ",")
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}
