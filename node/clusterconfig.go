package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tailscale/hujson"

	"github.com/tether-proxy/tether/cluster"
	adminapi "github.com/tether-proxy/tether/node/admin"
	"github.com/tether-proxy/tether/proxy"
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/store"
)

// clusterConfigState is what this node made of the cluster's config: the
// version it serves (0: its own file's ReverseProxy section) and, when it
// could not apply a newer one, which and why.
type clusterConfigState struct {
	mu      sync.Mutex
	version uint64
	index   uint64 // the index version was committed at
	// failed is the index of the version that could not be applied (0:
	// none); versions are told apart by index too, as a restored backup
	// may bring another version under a number already served.
	failed uint64
	err    string
	// changed wakes the store watcher, which gossips the state (never
	// under reloadMu: filling gossip meta takes it).
	changed chan struct{}
	// check (tests) runs on a config before this node applies it: a
	// node whose files differ from the others'.
	check func(*config.Config) error
}

func (s *clusterConfigState) get() (version uint64, err string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, s.err
}

// maxConfigErrorMeta bounds the config error gossip carries (gossip meta
// is at most 512 bytes); the node's log has it whole.
const maxConfigErrorMeta = 120

// loadConfig reads the node's file with content (the cluster's
// ReverseProxy section; nil: the file's own) in place of its section, and
// checks it as a reload does.
func (n *Node) loadConfig(content []byte) (*config.Config, []string, error) {
	cfg, warnings, err := config.LoadWith(n.cfg.ConfigPath, config.LoadOptions{Strict: n.cfg.Strict, Listen: n.cfg.Listen, ReverseProxy: content,
		Info: func(m string) { n.log.Debug("config: " + m) }})
	if err == nil {
		if errs := proxy.Compile(cfg); len(errs) > 0 {
			err = errs
		}
	}
	if err == nil && n.clusterCfg.check != nil && content != nil {
		err = n.clusterCfg.check(cfg)
	}
	return cfg, warnings, err
}

// withClusterConfig is the config this node serves given its file's
// (file): the cluster's version cur merged with the file's node settings
// once one is committed. It records what it applied or why it could not
// (nil); at start and on reload it says once that the file's ReverseProxy
// section differs.
func (n *Node) withClusterConfig(file *config.Config, cur store.ConfigVersion) *config.Config {
	cfg, err := n.mergeClusterConfig(file, cur, true)
	n.noteClusterConfig(cur, err)
	return cfg
}

// mergeClusterConfig is withClusterConfig without the record; warn says
// whether to say the file differs (file is not nil then).
func (n *Node) mergeClusterConfig(file *config.Config, cur store.ConfigVersion, warn bool) (*config.Config, error) {
	if cur.Version == 0 {
		return file, nil
	}
	merged, _, err := n.loadConfig(cur.Content)
	if err != nil {
		return nil, err
	}
	if warn && !reflect.DeepEqual(file.ReverseProxy, merged.ReverseProxy) {
		n.log.Warn(fmt.Sprintf("the config file's ReverseProxy differs from the cluster's version %d; the cluster's is served", cur.Version), "file", n.cfg.ConfigPath)
	}
	return merged, nil
}

// noteClusterConfig records that version was applied (err nil) or could
// not be, logs it, and tells gossip and the event stream.
func (n *Node) noteClusterConfig(v store.ConfigVersion, err error) {
	version := v.Version
	s := &n.clusterCfg
	s.mu.Lock()
	prev, prevIndex, prevFailed := s.version, s.index, s.failed
	if err == nil {
		s.version, s.index, s.failed, s.err = version, v.Index, 0, ""
	} else {
		s.failed, s.err = max(v.Index, 1), fmt.Sprintf("version %d: %s", version, oneLine(err))
	}
	kept := s.version
	s.mu.Unlock()
	if err == nil && prev == version && prevIndex == v.Index && prevFailed == 0 {
		return
	}
	data := map[string]any{"version": version, "index": v.Index}
	if err != nil {
		if prevFailed != max(v.Index, 1) {
			n.log.Error("the cluster's config cannot be applied on this node; keeping the one it serves", "version", version, "serving", kept, "error", err.Error())
		}
		data["error"], data["serving"] = oneLine(err), kept
	} else if version > 0 {
		n.log.Info("cluster config applied", "version", version, "index", v.Index)
	}
	if n.ev.bus != nil {
		n.ev.bus.Publish(adminapi.EventConfig, time.Now(), data)
	}
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// metaRoom is how large gossip meta may grow with a config error (512
// bytes at most, less room for the formation vote Membership adds).
const metaRoom = 448

// fitConfigError cuts m's config error so that m stays within metaRoom:
// meta that does not fit is not gossiped at all.
func fitConfigError(m *cluster.Meta) {
	for m.ConfigError != "" {
		b, err := json.Marshal(m)
		if err != nil || len(b) <= metaRoom {
			return
		}
		cut := max(len(m.ConfigError)-(len(b)-metaRoom)-3, 0)
		m.ConfigError = strings.ToValidUTF8(m.ConfigError[:cut], "") + "..."
		if cut == 0 {
			m.ConfigError = ""
		}
	}
}

// configMeta is the state as gossip meta carries it.
func (n *Node) configMeta() (uint64, string) {
	v, e := n.clusterCfg.get()
	if len(e) > maxConfigErrorMeta {
		e = strings.ToValidUTF8(e[:maxConfigErrorMeta-3], "") + "..."
	}
	return v, e
}

// oneLine is err's text on one line (config.Errors list one per line).
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}

// applyClusterConfig brings the data path to the cluster's current config
// version when it moved (the store watcher calls it after every change,
// and a follower that forwarded a write before it answers). A version
// this node cannot apply leaves the one it serves in place.
func (n *Node) applyClusterConfig() {
	cur := n.store.ConfigCurrent()
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	if n.proxy == nil {
		return
	}
	s := &n.clusterCfg
	s.mu.Lock()
	done := (cur.Version == s.version && cur.Index == s.index) || max(cur.Index, 1) == s.failed
	s.mu.Unlock()
	if done {
		return
	}
	var file *config.Config
	if cur.Version == 0 { // a restored backup without one: back to the file's
		var err error
		if file, _, err = n.loadConfig(nil); err != nil {
			n.log.Error("the cluster holds no config version any more, and the config file does not load; keeping the running configuration", "error", err.Error())
			return
		}
	}
	cfg, err := n.mergeClusterConfig(file, cur, false)
	if err == nil {
		err = n.proxy.Update(cfg)
	}
	n.noteClusterConfig(cur, err)
	if err != nil {
		return
	}
	n.swapConfig(cfg)
}

// swapConfig makes cfg the running configuration once the data path took
// it; reloadMu is held.
func (n *Node) swapConfig(cfg *config.Config) {
	old := n.current
	n.current = cfg
	// Destinations it added take the replicated drain state and the
	// cluster's health view; verdicts of removed ones are dropped.
	n.applyDrains()
	if sh := n.health; sh != nil {
		sh.setFanouts(cfg)
		sh.forgetRemoved(old, cfg)
		sh.applyAll()
	}
}

// clusterConfigRules are the node's checks of a pushed file
// (admin.ClusterConfig).
type clusterConfigRules struct{ n *Node }

func (r clusterConfigRules) Applied() (uint64, string) { return r.n.clusterCfg.get() }

// Check takes a pushed config file as `tether config validate` takes a
// file, and keeps its ReverseProxy section alone, checked with the rules of
// `tether config validate` as this node would serve it, with its own
// file's other sections. Each other top-level section is left out and
// named in a warning, never dropped unsaid: a node's own settings
// (Kestrel, Listeners ...) stay each node's file's, and ASP.NET's
// boilerplate and the application's own sections, which a load ignores,
// are no part of the cluster's config either.
func (r clusterConfigRules) Check(body []byte) ([]byte, []string, []adminapi.FieldError) {
	std, err := hujson.Standardize(bytes.TrimPrefix(slices.Clone(body), []byte("\ufeff")))
	if err != nil {
		if _, _, perr := config.Parse(body, "json"); perr != nil {
			return nil, nil, fieldErrors(perr)
		}
		return nil, nil, []adminapi.FieldError{{Path: "$", Error: err.Error()}}
	}
	keys, vals, err := topLevelSections(std)
	if err != nil {
		return nil, nil, []adminapi.FieldError{{Path: "$", Error: "a config file is a JSON object: " + err.Error()}}
	}
	var errs []adminapi.FieldError
	var section json.RawMessage
	var left, typos []string // typos: keys taken for a misspelt ReverseProxy
	seen := make(map[string]string, len(keys))
	for i, k := range keys {
		if first, ok := seen[strings.ToLower(k)]; ok {
			errs = append(errs, adminapi.FieldError{Path: k, Error: fmt.Sprintf("duplicate key (same as %q; keys are case-insensitive)", first)})
			continue
		}
		seen[strings.ToLower(k)] = k
		name, typo := config.TopLevelKey(k)
		switch {
		case name == "ReverseProxy" && !typo:
			section = vals[i]
		case name == "$schema":
		case typo && r.n.cfg.Strict:
			errs = append(errs, adminapi.FieldError{Path: k, Error: "unknown key; did you mean " + name + "?"})
		case typo && name == "ReverseProxy":
			typos = append(typos, k)
		default:
			left = append(left, leftOut(k, name, typo))
		}
	}
	for _, k := range typos {
		if section == nil {
			errs = append(errs, adminapi.FieldError{Path: k, Error: "unknown key; did you mean ReverseProxy?"})
		} else {
			left = append(left, leftOut(k, "ReverseProxy", true))
		}
	}
	if t := bytes.TrimSpace(section); len(t) == 0 || t[0] != '{' {
		msg := "missing: a pushed config holds the ReverseProxy section"
		if len(t) > 0 {
			msg = "not a JSON object"
		}
		return nil, nil, append(errs, adminapi.FieldError{Path: "ReverseProxy", Error: msg})
	}
	var content bytes.Buffer
	if err := json.Compact(&content, section); err != nil {
		return nil, nil, append(errs, adminapi.FieldError{Path: "ReverseProxy", Error: err.Error()})
	}
	_, all, err := r.n.loadConfig(content.Bytes())
	if err != nil {
		errs = append(errs, fieldErrors(err)...)
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	// What was left out, then the warnings about the pushed section (those
	// about this node's own sections are its file's).
	warnings := left
	for _, w := range all {
		if strings.HasPrefix(w, "ReverseProxy") {
			warnings = append(warnings, w)
		}
	}
	return content.Bytes(), warnings, nil
}

// leftOut is the warning naming a pushed file's top-level key left out of
// the cluster's config: name is the section a load reads it as ("": the
// application's own), typo whether it is taken for a misspelling of name.
func leftOut(key, name string, typo bool) string {
	switch {
	case typo:
		return fmt.Sprintf("%s: unknown key; did you mean %s? not pushed", key, name)
	case name == "":
		return key + ": not a tether, YARP or ASP.NET section; not pushed (the application's own)"
	case name == "Logging":
		return key + ": not pushed: ASP.NET's log categories, which tether does not read (each node logs at its --log-level)"
	case name == "AllowedHosts":
		return key + ": not pushed: ASP.NET's host filtering, which tether does not do (a route's Match.Hosts restricts the hosts it serves)"
	}
	return key + ": a node's own setting, not pushed; each node keeps its file's"
}

// topLevelSections are the keys of a JSON object, in order, duplicates
// included, with their values.
func topLevelSections(data []byte) ([]string, []json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil {
		return nil, nil, err
	} else if tok != json.Delim('{') {
		kind := "null"
		switch tok.(type) {
		case json.Delim:
			kind = "an array"
		case string:
			kind = "a string"
		case float64:
			kind = "a number"
		case bool:
			kind = "a boolean"
		}
		return nil, nil, fmt.Errorf("this one is %s", kind)
	}
	var keys []string
	var vals []json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		keys, vals = append(keys, tok.(string)), append(vals, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, errors.New("more than one JSON value")
	}
	return keys, vals, nil
}

// fieldErrors lists a config error's problems with their paths.
func fieldErrors(err error) []adminapi.FieldError {
	var ce config.Errors
	if !errors.As(err, &ce) {
		return []adminapi.FieldError{{Error: err.Error()}}
	}
	out := make([]adminapi.FieldError, 0, len(ce))
	for _, e := range ce {
		out = append(out, adminapi.FieldError{Path: e.Path, Error: e.Message})
	}
	return out
}
