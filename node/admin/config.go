package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/tether-proxy/tether/store"
	"github.com/tether-proxy/tether/store/command"
)

// EventConfig: this node applied a version of the cluster's config, or
// could not (data "error").
const EventConfig = "config"

// ClusterConfig is the node's side of the cluster's config: the rules a
// pushed file is checked by (those of `tether config validate`, applied to
// the file's ReverseProxy section with this node's own settings), and
// the version this node serves.
type ClusterConfig interface {
	// Check validates a pushed config file and returns its ReverseProxy
	// section as compact JSON with the warnings about the file (each
	// top-level section left out, keys accepted but not implemented), or
	// every error with its JSON path.
	Check(body []byte) (content []byte, warnings []string, errs []FieldError)
	// Applied is the version this node serves (0: its own file's) and,
	// when it could not apply a newer one, why.
	Applied() (version uint64, err string)
}

// FieldError is one problem of a pushed config, at its JSON path.
type FieldError struct {
	Path  string `json:"path"`
	Error string `json:"error"`
}

// maxConfigBody bounds a pushed file (its ReverseProxy section is bounded
// by the store).
const maxConfigBody = 2 * command.MaxConfigContent

// configBody is a version as GET /v1/config answers it.
func configBody(v store.ConfigVersion) map[string]any {
	if v.Version == 0 {
		return map[string]any{"version": 0, "config": nil}
	}
	return map[string]any{"version": v.Version, "time": v.Time, "summary": v.Summary, "index": v.Index,
		"config": map[string]json.RawMessage{"ReverseProxy": v.Content}}
}

func (a *API) configGet(w http.ResponseWriter, r *http.Request) {
	SetIndex(w, a.Store.AppliedIndex())
	v := a.Store.ConfigCurrent()
	w.Header().Set("ETag", strconv.Quote(strconv.FormatUint(v.Version, 10)))
	WriteJSON(w, http.StatusOK, configBody(v))
}

func (a *API) configHistory(w http.ResponseWriter, r *http.Request) {
	SetIndex(w, a.Store.AppliedIndex())
	out := []map[string]any{}
	for _, v := range a.Store.ConfigHistory() {
		out = append(out, map[string]any{"version": v.Version, "time": v.Time, "summary": v.Summary})
	}
	WriteJSON(w, http.StatusOK, map[string]any{"versions": out})
}

func (a *API) configVersion(w http.ResponseWriter, r *http.Request) {
	SetIndex(w, a.Store.AppliedIndex())
	n, err := strconv.ParseUint(r.PathValue("n"), 10, 64)
	if err != nil {
		WriteError(w, http.StatusBadRequest, fmt.Sprintf("config version %q is not a number", r.PathValue("n")))
		return
	}
	v, ok := a.Store.ConfigAt(n)
	if !ok {
		WriteError(w, http.StatusNotFound, fmt.Sprintf("config version %d is not kept (the history holds the last 50 versions)", n))
		return
	}
	w.Header().Set("ETag", strconv.Quote(strconv.FormatUint(v.Version, 10)))
	WriteJSON(w, http.StatusOK, configBody(v))
}

// ifVersion reads If-Match: "<version>", quoted or bare (0: none).
func ifVersion(r *http.Request) (uint64, error) {
	h := strings.TrimSpace(r.Header.Get("If-Match"))
	if h == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(strings.Trim(strings.TrimPrefix(h, "W/"), `"`), 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("If-Match %q is not a config version (want \"N\", N from GET /v1/config's ETag)", h)
	}
	return n, nil
}

// configPush answers PUT /v1/config (on the leader): the body, a config
// file, is checked by the node's rules and its ReverseProxy section
// committed as the next version.
func (a *API) configPush(w http.ResponseWriter, r *http.Request) {
	ifv, err := ifVersion(r)
	if err != nil {
		WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxConfigBody+1))
	if err != nil {
		WriteError(w, http.StatusBadRequest, "reading the config: "+err.Error())
		return
	}
	if len(body) > maxConfigBody {
		WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("config larger than %d bytes", maxConfigBody))
		return
	}
	content, warnings, errs := a.Config.Check(body)
	if len(errs) == 0 && len(content) > command.MaxConfigContent {
		errs = []FieldError{{Path: "ReverseProxy", Error: fmt.Sprintf("%d bytes of JSON, at most %d", len(content), command.MaxConfigContent)}}
	}
	if len(errs) > 0 {
		WriteJSON(w, http.StatusBadRequest, map[string]any{"error": fmt.Sprintf("config invalid: %d errors", len(errs)), "errors": errs})
		return
	}
	cur := a.Store.ConfigCurrent()
	a.commitConfig(w, r, store.SetConfig{ReqID: RequestID(r), IfVersion: ifv, Content: content, Summary: Summarize(cur.Content, content)}, "config push", warnings)
}

// configRollback answers POST /v1/config/rollback (on the leader): the
// content of a kept version becomes the next version.
func (a *API) configRollback(w http.ResponseWriter, r *http.Request) {
	ifv, err := ifVersion(r)
	if err != nil {
		WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	var req struct {
		Version uint64 `json:"version"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Version == 0 {
		WriteError(w, http.StatusBadRequest, `want {"version": N}, N a kept config version`)
		return
	}
	v, ok := a.Store.ConfigAt(req.Version)
	if !ok {
		WriteError(w, http.StatusNotFound, fmt.Sprintf("config version %d is not kept (the history holds the last 50 versions)", req.Version))
		return
	}
	a.commitConfig(w, r, store.SetConfig{ReqID: RequestID(r), IfVersion: ifv, Content: v.Content, Summary: fmt.Sprintf("rollback to version %d", req.Version)}, "config rollback", nil)
}

// commitConfig commits cmd and answers with its version; warnings (the
// pushed file's sections left out, its keys accepted but not implemented)
// go into the answer, so no ignored key passes unsaid.
func (a *API) commitConfig(w http.ResponseWriter, r *http.Request, cmd store.SetConfig, what string, warnings []string) {
	// The commit time is the cluster time, which no one node's clock moves.
	now, err := a.Node.ClusterNow()
	if err != nil {
		a.Writes.WriteApplyError(w, what, err)
		return
	}
	cmd.At = now.UTC()
	c, err := a.Store.CommitRequest(cmd, RequestBinding(r))
	if errors.Is(err, store.ErrConfigVersion) {
		cur := a.Store.ConfigCurrent().Version
		WriteJSON(w, http.StatusPreconditionFailed, map[string]any{"error": fmt.Sprintf("config version is %d, not %d", cur, cmd.IfVersion), "version": cur})
		return
	}
	if err != nil {
		a.Writes.WriteApplyError(w, what, err)
		return
	}
	version, err := strconv.ParseUint(c.Value, 10, 64)
	if err != nil {
		a.Writes.WriteApplyError(w, what, fmt.Errorf("the committed config carries no version (%q)", c.Value))
		return
	}
	summary := cmd.Summary
	if v, ok := a.Store.ConfigAt(version); ok {
		summary = v.Summary // a retry answers with the first try's
	}
	a.Log.Info("cluster config committed", "version", version, "index", c.Index, "summary", summary)
	SetCommitted(w, c.Index)
	w.Header().Set("ETag", strconv.Quote(strconv.FormatUint(version, 10)))
	body := map[string]any{"version": version, "index": c.Index, "summary": summary}
	if len(warnings) > 0 {
		body["warnings"] = warnings
	}
	WriteJSON(w, http.StatusOK, body)
}

// Summarize says what a ReverseProxy section holds and, against the
// previous version's (nil: none), what changed: "3 routes, 2 clusters;
// routes added: r3; clusters changed: c1".
func Summarize(prev, cur []byte) string {
	type section struct {
		Routes   map[string]json.RawMessage
		Clusters map[string]json.RawMessage
	}
	var p, c section
	_ = json.Unmarshal(prev, &p)
	_ = json.Unmarshal(cur, &c)
	s := fmt.Sprintf("%d routes, %d clusters", len(c.Routes), len(c.Clusters))
	var parts []string
	diff := func(kind string, a, b map[string]json.RawMessage) {
		var added, removed, changed []string
		for _, k := range slices.Sorted(maps.Keys(b)) {
			if old, ok := a[k]; !ok {
				added = append(added, k)
			} else if !jsonEqual(old, b[k]) {
				changed = append(changed, k)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(a)) {
			if _, ok := b[k]; !ok {
				removed = append(removed, k)
			}
		}
		for _, l := range []struct {
			what string
			ids  []string
		}{{"added", added}, {"removed", removed}, {"changed", changed}} {
			if len(l.ids) > 0 {
				parts = append(parts, kind+" "+l.what+": "+clip(strings.Join(l.ids, ", ")))
			}
		}
	}
	if prev != nil { // the first version: nothing to compare with
		diff("routes", p.Routes, c.Routes)
		diff("clusters", p.Clusters, c.Clusters)
		if len(parts) == 0 {
			parts = append(parts, "no route or cluster changed")
		}
	}
	if len(parts) > 0 {
		s += "; " + strings.Join(parts, "; ")
	}
	if len(s) > 1000 {
		s = s[:997] + "..."
	}
	return s
}

// clip keeps a list of ids short enough for a summary.
func clip(s string) string {
	if len(s) > 200 {
		return s[:197] + "..."
	}
	return s
}

func jsonEqual(a, b []byte) bool {
	var x, y bytes.Buffer
	if json.Compact(&x, a) != nil || json.Compact(&y, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(x.Bytes(), y.Bytes())
}

// configStatus is this node's applied version for /v1/status.
func (a *API) configStatus() uint64 {
	if a.Config == nil {
		return 0
	}
	v, _ := a.Config.Applied()
	return v
}
