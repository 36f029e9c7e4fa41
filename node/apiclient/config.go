package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// ConfigVersion is one version of the cluster's configuration, as GET
// /v1/config and GET /v1/config/versions/{n} answer. Version 0 is none:
// nothing was pushed, every node serves its own file (Config is null).
type ConfigVersion struct {
	Version uint64          `json:"version"`
	Time    time.Time       `json:"time,omitzero"`
	Summary string          `json:"summary,omitempty"`
	Index   uint64          `json:"index,omitempty"` // the Raft index that committed it
	Config  json.RawMessage `json:"config"`
}

// ConfigEntry is one line of GET /v1/config/history.
type ConfigEntry struct {
	Version uint64    `json:"version"`
	Time    time.Time `json:"time"`
	Summary string    `json:"summary"`
}

// ConfigPushed is the answer to a push or a rollback: the version it
// committed, at which Raft index.
type ConfigPushed struct {
	Version  uint64   `json:"version"`
	Index    uint64   `json:"index"`
	Summary  string   `json:"summary"`
	Warnings []string `json:"warnings,omitempty"`
}

// ConfigFieldError is one problem of a refused configuration, at its JSON
// path (e.g. ReverseProxy.Routes.r1.Match).
type ConfigFieldError struct {
	Path  string `json:"path"`
	Error string `json:"error"`
}

func (e ConfigFieldError) String() string {
	if e.Path == "" {
		return e.Error
	}
	return e.Path + ": " + e.Error
}

// ConfigInvalidError is a 400 answer to a push: the leader's validation
// refused the configuration, and nothing changed.
type ConfigInvalidError struct {
	Message string
	Errors  []ConfigFieldError
}

func (e *ConfigInvalidError) Error() string { return e.Message + " (HTTP 400)" }

// ConfigStaleError is a 412 answer: the push (or rollback) named a version
// with If-Match that is not the cluster's current one, and nothing changed.
type ConfigStaleError struct {
	Message string
	Current uint64 // the cluster's version when the leader refused
}

func (e *ConfigStaleError) Error() string { return e.Message + " (HTTP 412)" }

// PushConfig sends a configuration file's content (JSON) to PUT
// /v1/config. ifVersion, when not 0, is the version the push replaces
// (If-Match): another version in between refuses it with a
// *ConfigStaleError. An invalid configuration is a *ConfigInvalidError.
func (c *Client) PushConfig(ctx context.Context, content []byte, ifVersion uint64) (ConfigPushed, error) {
	var out ConfigPushed
	err := c.configCall(ctx, http.MethodPut, "/v1/config", content, ifVersion, &out)
	return out, err
}

// RollbackConfig commits version n's content as a new version (POST
// /v1/config/rollback), with If-Match as PushConfig.
func (c *Client) RollbackConfig(ctx context.Context, n, ifVersion uint64) (ConfigPushed, error) {
	body, _ := json.Marshal(map[string]uint64{"version": n})
	var out ConfigPushed
	err := c.configCall(ctx, http.MethodPost, "/v1/config/rollback", body, ifVersion, &out)
	return out, err
}

// Config is the cluster's current version (GET /v1/config).
func (c *Client) Config(ctx context.Context) (ConfigVersion, error) {
	var out ConfigVersion
	err := c.configCall(ctx, http.MethodGet, "/v1/config", nil, 0, &out)
	return out, err
}

// ConfigAt is version n, as long as the history keeps it (GET
// /v1/config/versions/{n}).
func (c *Client) ConfigAt(ctx context.Context, n uint64) (ConfigVersion, error) {
	var out ConfigVersion
	err := c.configCall(ctx, http.MethodGet, "/v1/config/versions/"+strconv.FormatUint(n, 10), nil, 0, &out)
	return out, err
}

// ConfigHistory lists the versions the cluster keeps, newest first (GET
// /v1/config/history).
func (c *Client) ConfigHistory(ctx context.Context) ([]ConfigEntry, error) {
	var out struct {
		Versions []ConfigEntry `json:"versions"`
	}
	err := c.configCall(ctx, http.MethodGet, "/v1/config/history", nil, 0, &out)
	return out.Versions, err
}

// configCall sends one request of the config endpoints and decodes a 2xx
// answer into out; refusals become the errors above, or Do's.
func (c *Client) configCall(ctx context.Context, method, path string, body []byte, ifVersion uint64, out any) error {
	var hdr http.Header
	if ifVersion != 0 {
		hdr = http.Header{"If-Match": {strconv.Quote(strconv.FormatUint(ifVersion, 10))}}
	}
	resp, err := c.send(ctx, method, path, body, hdr, jsonLimit)
	if err != nil {
		return err
	}
	var refusal struct {
		Error   string             `json:"error"`
		Errors  []ConfigFieldError `json:"errors"`
		Version *uint64            `json:"version"`
	}
	ok := resp.StatusCode/100 == 2
	if len(bytes.TrimSpace(resp.Body)) == 0 {
		if ok {
			return c.notJSON(resp)
		}
		return fmt.Errorf("admin API answered %s", resp.Status)
	}
	var target any = &refusal
	if ok {
		target = out
	}
	if json.Unmarshal(resp.Body, target) != nil {
		return c.notJSON(resp)
	}
	switch {
	case ok:
		return nil
	case resp.StatusCode == http.StatusBadRequest && len(refusal.Errors) > 0:
		return &ConfigInvalidError{Message: refusal.Error, Errors: refusal.Errors}
	case resp.StatusCode == http.StatusPreconditionFailed && refusal.Version != nil:
		return &ConfigStaleError{Message: refusal.Error, Current: *refusal.Version}
	case refusal.Error != "":
		return fmt.Errorf("%s (HTTP %d)", refusal.Error, resp.StatusCode)
	}
	return fmt.Errorf("admin API answered %s", resp.Status)
}

// notJSON is the error for an answer that is not the admin API's JSON.
func (c *Client) notJSON(resp *Response) error {
	return fmt.Errorf("admin API at %s answered %s with a body that is not JSON: is it a proxy port? --admin (env TETHER_ADMIN) takes the agent's --admin-addr (default %s)", c.base(), resp.Status, DefaultAddr)
}
