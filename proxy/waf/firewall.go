package waf

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/corazawaf/coraza/v3"
	"github.com/corazawaf/coraza/v3/experimental"
	"github.com/corazawaf/coraza/v3/experimental/plugins/plugintypes"
	"github.com/corazawaf/coraza/v3/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/proxy/config"
)

// Options are a Firewall's collaborators.
type Options struct {
	// Audit receives one JSON line per flagged request; nil: discarded.
	Audit *slog.Logger
	// Registerer receives the WAF's metrics; nil: not registered.
	Registerer prometheus.Registerer
}

// Firewall is one compiled rule set, shared by every route's Policy.
type Firewall struct {
	waf         coraza.WAF
	fingerprint string
	bodyLimit   int64
	// reject: SecRequestBodyLimitAction Reject (tether enforces it, see
	// Policy.Check).
	reject    bool
	responses bool
	audit     *slog.Logger
	metrics   *metrics
}

// txControl is what tether needs of a Coraza transaction beyond
// types.Transaction; Coraza's own transaction has it (checked in New).
type txControl interface {
	types.Transaction
	plugintypes.TransactionState
	RemoveRuleByID(id int)
	RemoveRuleByIDRange(start, end int)
	DetectionOnlyInterruption() *types.Interruption
}

// New compiles cfg's rule set, or returns old when the rule settings and
// rule files are unchanged (a reload that only touches routes). It returns
// nil when no route runs the WAF. Errors carry config paths; rule errors
// name the file and line.
func New(cfg *config.Config, old *Firewall, opts Options) (*Firewall, config.Errors) {
	if !inUse(cfg) {
		return nil, nil
	}
	w := cfg.Waf.WithDefaults()
	setup, err := ruleFiles("Waf.SetupRules", w.SetupRules)
	if err != nil {
		return nil, err
	}
	rules, err := ruleFiles("Waf.Rules", w.Rules)
	if err != nil {
		return nil, err
	}
	all := append(setup[:len(setup):len(setup)], rules...)
	fp, err := fingerprint(w, all)
	if err != nil {
		return nil, err
	}
	audit := opts.Audit
	if audit == nil {
		audit = slog.New(slog.DiscardHandler)
	}
	m := newMetrics(opts.Registerer)
	if old != nil && old.fingerprint == fp {
		nf := *old
		nf.audit, nf.metrics = audit, m
		return &nf, nil
	}

	engine, errs := compiled(fp, func() (coraza.WAF, config.Errors) {
		conf := coraza.NewWAFConfig().WithRootFS(rootFS{}).
			WithDirectives(baseDirectives(w))
		for _, f := range setup {
			conf = conf.WithDirectivesFromFile(f.abs)
		}
		conf = conf.WithDirectives("Include @crs-setup.conf.example").
			WithDirectives("Include @owasp_crs/*.conf")
		if d := exclusionDirectives(w); d != "" {
			conf = conf.WithDirectives(d)
		}
		for _, f := range rules {
			conf = conf.WithDirectivesFromFile(f.abs)
		}
		engine, err := coraza.NewWAF(conf)
		if err != nil {
			return nil, ruleErrors(err, all)
		}
		probe := engine.NewTransaction()
		_, ok := probe.(txControl)
		_ = probe.Close()
		if !ok {
			return nil, config.Errors{{Path: "Waf", Message: "this Coraza build lacks per-transaction rule removal and detection-only interruptions"}}
		}
		return engine, nil
	})
	if errs != nil {
		return nil, errs
	}
	return &Firewall{
		waf:         engine,
		fingerprint: fp,
		bodyLimit:   w.MaxRequestBodySize,
		reject:      w.RequestBodyLimitAction == "Reject",
		responses:   w.InspectResponses,
		audit:       audit,
		metrics:     m,
	}, nil
}

// engines keeps the last few compiled rule sets by fingerprint: a node
// checks a config (proxy.Compile) before it builds it, and a reload back
// to an earlier rule set needs no second compile. An evicted engine is
// closed, which only drops its share of Coraza's pattern cache: snapshots
// and transactions still using it keep working.
var engines struct {
	sync.Mutex
	list []cachedEngine // most recent last
}

type cachedEngine struct {
	fp  string
	waf coraza.WAF
}

const maxCachedEngines = 3

func compiled(fp string, build func() (coraza.WAF, config.Errors)) (coraza.WAF, config.Errors) {
	engines.Lock()
	defer engines.Unlock()
	for i, e := range engines.list {
		if e.fp == fp {
			engines.list = append(append(engines.list[:i:i], engines.list[i+1:]...), e)
			return e.waf, nil
		}
	}
	w, errs := build()
	if errs != nil {
		return nil, errs
	}
	if len(engines.list) == maxCachedEngines {
		if c, ok := engines.list[0].waf.(experimental.WAFCloser); ok {
			_ = c.Close()
		}
		engines.list = engines.list[1:]
	}
	engines.list = append(engines.list, cachedEngine{fp: fp, waf: w})
	return w, nil
}

// inUse reports whether any route runs the WAF.
func inUse(cfg *config.Config) bool {
	for _, r := range cfg.ReverseProxy.Routes {
		if r == nil {
			continue
		}
		if m := cfg.WafMode(r); m == "Detection" || m == "Prevention" {
			return true
		}
	}
	return false
}

// baseDirectives configure the engine before the CRS loads. The engine is
// always DetectionOnly: tether enforces per route (see Policy). Coraza's
// own body limit action is ProcessPartial so that it never answers 413 by
// itself; tether applies RequestBodyLimitAction. Bodies are kept in memory
// up to the limit: no temporary files.
func baseDirectives(w config.Waf) string {
	var b strings.Builder
	b.WriteString("Include @coraza.conf-recommended\n")
	b.WriteString("SecRuleEngine DetectionOnly\n")
	b.WriteString("SecRequestBodyAccess On\n")
	fmt.Fprintf(&b, "SecRequestBodyLimit %d\n", w.MaxRequestBodySize)
	fmt.Fprintf(&b, "SecRequestBodyInMemoryLimit %d\n", w.MaxRequestBodySize)
	b.WriteString("SecRequestBodyLimitAction ProcessPartial\n")
	if w.InspectResponses {
		b.WriteString("SecResponseBodyAccess On\n")
		fmt.Fprintf(&b, "SecResponseBodyLimit %d\n", w.MaxResponseBodySize)
		b.WriteString("SecResponseBodyLimitAction ProcessPartial\n")
	} else {
		b.WriteString("SecResponseBodyAccess Off\n")
	}
	// tether writes its own audit line (audit.go).
	b.WriteString("SecAuditEngine Off\n")
	// CRS settings (crs-setup.conf.example's ids, which it then skips).
	fmt.Fprintf(&b, "SecAction \"id:900000,phase:1,pass,t:none,nolog,setvar:tx.blocking_paranoia_level=%d\"\n", w.ParanoiaLevel)
	fmt.Fprintf(&b, "SecAction \"id:900110,phase:1,pass,t:none,nolog,setvar:tx.inbound_anomaly_score_threshold=%d,setvar:tx.outbound_anomaly_score_threshold=4\"\n", w.AnomalyThreshold)
	return b.String()
}

// exclusionDirectives removes the rules excluded on every route; those
// excluded on some routes are removed per transaction.
func exclusionDirectives(w config.Waf) string {
	var ids []string
	for _, e := range w.Exclusions {
		if len(e.Routes) > 0 {
			continue
		}
		for _, s := range e.RuleIds {
			r, err := config.ParseWafRuleIDs(s)
			if err != nil {
				continue // config's validation reports it
			}
			if r.First == r.Last {
				ids = append(ids, fmt.Sprint(r.First))
			} else {
				ids = append(ids, fmt.Sprintf("%d-%d", r.First, r.Last))
			}
		}
	}
	if len(ids) == 0 {
		return ""
	}
	return "SecRuleRemoveById " + strings.Join(ids, " ") + "\n"
}

// fingerprint identifies what the compiled rule set depends on: the
// settings that become directives and the rule files' contents.
func fingerprint(w config.Waf, files []ruleFile) (string, config.Errors) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", baseDirectives(w), exclusionDirectives(w))
	for _, f := range files {
		data, err := os.ReadFile(f.abs)
		if err != nil {
			return "", config.Errors{{Path: f.path, Message: err.Error()}}
		}
		fmt.Fprintf(h, "%s\x00%s\x00%d\x00", f.path, f.abs, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ruleFile is one operator rule file: its config path, as given, absolute.
type ruleFile struct{ path, given, abs string }

func ruleFiles(key string, names []string) ([]ruleFile, config.Errors) {
	out := make([]ruleFile, len(names))
	for i, f := range names {
		p := fmt.Sprintf("%s[%d]", key, i)
		abs, err := filepath.Abs(f)
		if err != nil {
			return nil, config.Errors{{Path: p, Message: err.Error()}}
		}
		out[i] = ruleFile{path: p, given: f, abs: abs}
	}
	return out, nil
}

// ruleErrors turns a failed compile into config errors. Coraza's message
// names neither file nor line, so each rule file's directives are compiled
// one by one until one fails the same way: that is the file and line.
func ruleErrors(err error, files []ruleFile) config.Errors {
	msg := err.Error()
	_, tail, found := strings.Cut(msg, "failed to parse string: ")
	if !found {
		tail = msg
	}
	if strings.HasPrefix(msg, "invalid WAF config from file") {
		for _, f := range files {
			if line, ok := locate(f.abs, tail); ok {
				return config.Errors{{Path: f.path, Message: fmt.Sprintf("%s:%d: %s", f.given, line, tail)}}
			}
		}
		return config.Errors{{Path: "Waf", Message: "rule files: " + tail}}
	}
	return config.Errors{{Path: "Waf", Message: "rule set: " + tail}}
}

// locate finds the line of the first directive in file that fails to
// compile on its own with the message want.
func locate(file, want string) (int, bool) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		start := i
		text := strings.TrimSpace(lines[i])
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		var b strings.Builder
		for strings.HasSuffix(strings.TrimRight(lines[i], " \t\r"), "\\") && i+1 < len(lines) {
			b.WriteString(lines[i])
			b.WriteByte('\n')
			i++
		}
		b.WriteString(lines[i])
		_, err := coraza.NewWAF(coraza.NewWAFConfig().WithRootFS(rootFS{}).WithDirectives(b.String()))
		if err != nil && strings.HasSuffix(err.Error(), want) {
			return start + 1, true
		}
	}
	return 0, false
}
