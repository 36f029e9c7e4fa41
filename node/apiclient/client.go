package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// DefaultAddr is the admin listener's default address (an agent's
// --admin-addr).
const DefaultAddr = "127.0.0.1:9901"

// Client talks to one node's admin API.
type Client struct {
	// Base is the admin URL, e.g. http://127.0.0.1:9901; without a
	// scheme, http:// is assumed.
	Base  string
	Token string
	// HTTP sends the requests; nil means a client with a 30 s timeout.
	HTTP *http.Client
}

// Response is an answer as it came: status, headers and body.
type Response struct {
	StatusCode int
	Status     string
	Header     http.Header
	Body       []byte
}

// Limits on how much of an answer is read.
const (
	jsonLimit = 16 << 20  // a JSON answer
	rawLimit  = 256 << 20 // a raw answer (a snapshot)
)

// base is Base without a trailing slash, with a scheme.
func (c *Client) base() string {
	base := strings.TrimRight(c.Base, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return base
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP == nil {
		return &http.Client{Timeout: 30 * time.Second}
	}
	return c.HTTP
}

// send sends one request with a body (nil: none; otherwise sent as JSON
// unless hdr names another Content-Type) and extra headers, and returns the
// answer whatever its status, its body read up to limit bytes. Only a
// request that got no answer is an error, and it says what to check
// (Unreachable).
func (c *Client) send(ctx context.Context, method, path string, body []byte, hdr http.Header, limit int64) (*Response, error) {
	base := c.base()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, Unreachable(base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, Unreachable(base, err)
	}
	return &Response{StatusCode: resp.StatusCode, Status: resp.Status, Header: resp.Header, Body: b}, nil
}

// Send sends one request (body marshalled as JSON unless nil or already
// []byte, extra headers from hdr) and returns the answer whatever its
// status: for callers that look at the status, the headers or the body
// themselves.
func (c *Client) Send(ctx context.Context, method, path string, body any, hdr http.Header) (*Response, error) {
	b, err := marshal(body)
	if err != nil {
		return nil, err
	}
	return c.send(ctx, method, path, b, hdr, rawLimit)
}

func marshal(body any) ([]byte, error) {
	if body == nil {
		return nil, nil
	}
	if b, ok := body.([]byte); ok {
		return b, nil
	}
	return json.Marshal(body)
}

// Do sends one request and decodes the JSON answer into a generic value. A
// non-2xx answer becomes an error carrying the API's "error" text and the
// status code, "… (HTTP 404)".
func (c *Client) Do(ctx context.Context, method, path string, body any) (any, error) {
	if _, err := url.Parse(c.base() + path); err != nil {
		return nil, fmt.Errorf("admin URL %q: %w", c.Base, err)
	}
	b, err := marshal(body)
	if err != nil {
		return nil, err
	}
	resp, err := c.send(ctx, method, path, b, nil, jsonLimit)
	if err != nil {
		return nil, err
	}
	var v any
	if len(bytes.TrimSpace(resp.Body)) > 0 {
		if err := json.Unmarshal(resp.Body, &v); err != nil {
			return nil, c.notJSON(resp)
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

// Raw sends one request with a body sent as it is (a snapshot file) and
// returns the answer's body as it came; a non-2xx answer becomes an error
// with the API's "error" text and the status code.
func (c *Client) Raw(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	resp, err := c.send(ctx, method, path, body, nil, rawLimit)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(resp.Body, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("%s (HTTP %d)", e.Error, resp.StatusCode)
		}
		return nil, fmt.Errorf("admin API answered %s (HTTP %d)", resp.Status, resp.StatusCode)
	}
	return resp.Body, nil
}

// Check GETs a health path (/readyz, /healthz) and returns nil on 200; any
// other answer is an error naming the URL, the status and the start of
// the body.
func (c *Client) Check(ctx context.Context, path string) error {
	resp, err := c.send(ctx, http.MethodGet, path, nil, nil, 512)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d: %s", c.base()+path, resp.StatusCode, strings.TrimSpace(string(resp.Body)))
	}
	return nil
}

// Unreachable says what to check when the admin API at base did not
// answer as one: nothing listening (the agent is down, or --admin is not its
// --admin-addr), or a port that does not speak HTTP (gossip, Raft). The
// request's method and URL, which repeat base, are left out.
func Unreachable(base string, err error) error {
	msg := err.Error()
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("admin API at %s: nothing listens there (connection refused): is the agent running, and is --admin (env TETHER_ADMIN) its --admin-addr (default %s)?", base, DefaultAddr)
	case strings.Contains(msg, "malformed HTTP response") || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF):
		return fmt.Errorf("admin API at %s: it does not answer HTTP (a gossip or Raft port?): --admin (env TETHER_ADMIN) takes the agent's --admin-addr (default %s)", base, DefaultAddr)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("admin API at %s: %w", base, err)
}
