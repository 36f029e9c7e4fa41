package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// Client talks to a node's admin API for the CLI's client commands.
type Client struct {
	// Base is the admin URL, e.g. http://127.0.0.1:9901.
	Base  string
	Token string
	HTTP  *http.Client
}

// Do sends one request and decodes the JSON answer into a generic value. A
// non-2xx answer becomes an error carrying the API's "error" text.
func (c *Client) Do(ctx context.Context, method, path string, body any) (any, error) {
	base := strings.TrimRight(c.Base, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base + path)
	if err != nil {
		return nil, fmt.Errorf("admin URL %q: %w", c.Base, err)
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, AdminUnreachable(base, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, AdminUnreachable(base, err)
	}
	var v any
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("admin API at %s answered %s with a body that is not JSON: is it a proxy port? --admin (env TETHER_ADMIN) takes the agent's --admin-addr (default %s)", base, resp.Status, DefaultAdminAddr)
		}
	}
	if resp.StatusCode/100 != 2 {
		if m, ok := v.(map[string]any); ok {
			if e, ok := m["error"].(string); ok {
				return nil, fmt.Errorf("%s (HTTP %d)", e, resp.StatusCode)
			}
		}
		return nil, fmt.Errorf("admin API answered %s", resp.Status)
	}
	return v, nil
}

// AdminUnreachable says what to check when the admin API at base did not
// answer as one: nothing listening (the agent is down, or --admin is not its
// --admin-addr), or a port that does not speak HTTP (gossip, Raft). The
// request's method and URL, which repeat base, are left out.
func AdminUnreachable(base string, err error) error {
	msg := err.Error()
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("admin API at %s: nothing listens there (connection refused): is the agent running, and is --admin (env TETHER_ADMIN) its --admin-addr (default %s)?", base, DefaultAdminAddr)
	case strings.Contains(msg, "malformed HTTP response") || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF):
		return fmt.Errorf("admin API at %s: it does not answer HTTP (a gossip or Raft port?): --admin (env TETHER_ADMIN) takes the agent's --admin-addr (default %s)", base, DefaultAdminAddr)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("admin API at %s: %w", base, err)
}

// WriteTable renders an admin answer as a readable table: a list found
// under listKey becomes rows with the given columns (dotted paths into each
// object); other fields print as "key: value" lines. Times print to the
// second (TableTime).
func WriteTable(w io.Writer, v any, listKey string, columns ...string) error {
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

// TableTime is how tables print a time: to the second, in UTC (the JSON
// answer keeps the nanoseconds).
const TableTime = "2006-01-02 15:04:05Z07:00"

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
			return t.UTC().Format(TableTime)
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
