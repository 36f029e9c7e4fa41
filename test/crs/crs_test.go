package crs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	crstests "github.com/corazawaf/coraza-coreruleset/v4/tests"
	"go.yaml.in/yaml/v3"

	"github.com/tether-proxy/tether/proxy"
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/frontdoor"
	"github.com/tether-proxy/tether/test/testutil"
)

// The CRS test format (go-ftw's schema, the fields these tests use).
type ftwFile struct {
	RuleID int       `yaml:"rule_id"`
	Tests  []ftwTest `yaml:"tests"`
}

type ftwTest struct {
	TestID int        `yaml:"test_id"`
	Desc   string     `yaml:"desc"`
	Stages []ftwStage `yaml:"stages"`
}

type ftwStage struct {
	Input  ftwInput  `yaml:"input"`
	Output ftwOutput `yaml:"output"`
}

type ftwInput struct {
	Method              *string   `yaml:"method"`
	URI                 *string   `yaml:"uri"`
	Version             *string   `yaml:"version"`
	Headers             yaml.Node `yaml:"headers"`
	Data                *string   `yaml:"data"`
	EncodedRequest      string    `yaml:"encoded_request"`
	AutocompleteHeaders *bool     `yaml:"autocomplete_headers"`
}

type ftwOutput struct {
	Status      int   `yaml:"status"`
	ExpectError *bool `yaml:"expect_error"`
	RetryOnce   bool  `yaml:"retry_once"`
	Log         struct {
		ExpectIDs    []int  `yaml:"expect_ids"`
		NoExpectIDs  []int  `yaml:"no_expect_ids"`
		MatchRegex   string `yaml:"match_regex"`
		NoMatchRegex string `yaml:"no_match_regex"`
	} `yaml:"log"`
}

// Coraza's ignore list and expectation overrides.
type ftwConfig struct {
	TestOverride struct {
		Ignore map[string]string `yaml:"ignore"`
	} `yaml:"testoverride"`
}

type ftwOverrides struct {
	TestOverrides []struct {
		RuleID  int       `yaml:"rule_id"`
		TestIDs []int     `yaml:"test_ids"`
		Output  ftwOutput `yaml:"output"`
	} `yaml:"test_overrides"`
}

// crsCase is one test, ready to run.
type crsCase struct {
	file string
	id   string // "920100-4", as go-ftw names it
	test ftwTest
}

func loadCases(t *testing.T) (cases []crsCase, ignored map[string]string) {
	t.Helper()
	var cfg ftwConfig
	readYAML(t, "testdata/ftw.yml", &cfg)
	var ov ftwOverrides
	readYAML(t, "testdata/ftw-overrides.yml", &ov)
	err := fs.WalkDir(crstests.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		data, err := fs.ReadFile(crstests.FS, path)
		if err != nil {
			return err
		}
		var f ftwFile
		if err := yaml.Unmarshal(data, &f); err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		for _, tc := range f.Tests {
			for _, o := range ov.TestOverrides {
				if o.RuleID == f.RuleID && (len(o.TestIDs) == 0 || slices.Contains(o.TestIDs, tc.TestID)) {
					for i := range tc.Stages {
						tc.Stages[i].Output = o.Output
					}
				}
			}
			cases = append(cases, crsCase{file: path, id: fmt.Sprintf("%d-%d", f.RuleID, tc.TestID), test: tc})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.SliceStable(cases, func(i, j int) bool { return cases[i].file < cases[j].file })
	return cases, cfg.TestOverride.Ignore
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// subset is the fixed representative part `go test` runs: the first two
// tests of every rule file, so every CRS rule file and most rules are
// covered, leaving out bodies over 8 KiB (seconds each at paranoia 4,
// far more under -race). The full suite runs with TETHER_CRS_FULL=1.
func subset(cases []crsCase) []crsCase {
	var out []crsCase
	seen := map[string]int{}
	for _, c := range cases {
		if seen[c.file] < 2 && !bigBody(c) {
			out = append(out, c)
			seen[c.file]++
		}
	}
	return out
}

func bigBody(c crsCase) bool {
	for _, st := range c.test.Stages {
		if len(renderData(deref(st.Input.Data))) > 8<<10 || len(st.Input.EncodedRequest) > 8<<10 {
			return true
		}
	}
	return false
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// logIndex holds tether's access and audit lines by trace id.
type logIndex struct {
	mu     sync.Mutex
	access map[string]bool
	audit  map[string][]auditLine
}

type auditLine struct {
	TraceID string `json:"trace_id"`
	Action  string `json:"action"`
	RuleIDs []int  `json:"rule_ids"`
	Rules   []struct {
		ID   int    `json:"id"`
		Msg  string `json:"msg"`
		Data string `json:"data"`
	} `json:"rules"`
}

// writer returns an io.Writer for a JSON slog handler; each Write is one
// line.
func (li *logIndex) writer(audit bool) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		li.mu.Lock()
		defer li.mu.Unlock()
		if audit {
			var l auditLine
			if json.Unmarshal(p, &l) == nil && l.TraceID != "" {
				li.audit[l.TraceID] = append(li.audit[l.TraceID], l)
			}
			return len(p), nil
		}
		var l struct {
			TraceID string `json:"trace_id"`
		}
		if json.Unmarshal(p, &l) == nil && l.TraceID != "" {
			li.access[l.TraceID] = true
		}
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// waitDone waits for trace's access line: the audit line, if any, is
// written before it.
func (li *logIndex) waitDone(trace string) ([]auditLine, bool) {
	var lines []auditLine
	done := testutil.Until(10*time.Second, func() bool {
		li.mu.Lock()
		defer li.mu.Unlock()
		lines = li.audit[trace]
		return li.access[trace]
	})
	if !done {
		return nil, false
	}
	return lines, true
}

// reflectBackend answers as CRS's albedo backend does: POST /reflect
// returns the status, headers and body the JSON request names; everything
// else gets a small 200. Responses are text/plain, as in Coraza's run, so
// that the response rules read them.
func reflectBackend(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "text/plain")
	if r.URL.Path != "/reflect" {
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	var spec struct {
		Status      int               `json:"status"`
		Headers     map[string]string `json:"headers"`
		Body        string            `json:"body"`
		EncodedBody string            `json:"encodedBody"`
	}
	if err := json.Unmarshal(body, &spec); err != nil {
		http.Error(w, "bad reflect spec", http.StatusBadRequest)
		return
	}
	for k, v := range spec.Headers {
		w.Header().Set(k, v)
	}
	if spec.EncodedBody != "" {
		if b, err := base64.StdEncoding.DecodeString(spec.EncodedBody); err == nil {
			spec.Body = string(b)
		}
	}
	if spec.Status == 0 {
		spec.Status = http.StatusOK
	}
	w.WriteHeader(spec.Status)
	_, _ = io.WriteString(w, spec.Body)
}

// startTether runs tether's listener and data path in Detection mode at
// paranoia level 4 with response inspection, in front of the backend.
func startTether(t *testing.T, li *logIndex) string {
	t.Helper()
	be := httptest.NewServer(http.HandlerFunc(reflectBackend))
	t.Cleanup(be.Close)
	setup, err := filepath.Abs("testdata/crs-setup-regression.conf")
	if err != nil {
		t.Fatal(err)
	}
	js := fmt.Sprintf(`{
  "Listeners": [{ "Address": "127.0.0.1:0" }],
  "Waf": { "Mode": "Detection", "ParanoiaLevel": 4, "InspectResponses": true,
           "MaxRequestBodySize": 13107200, "SetupRules": [%q] },
  "ReverseProxy": {
    "Routes": { "all": { "ClusterId": "crs", "Match": { "Path": "{**catch-all}" } } },
    "Clusters": { "crs": { "Destinations": { "albedo": { "Address": %q } } } }
  }
}`, setup, be.URL)
	cfg, _, err := config.Parse([]byte(js), "json")
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(cfg, proxy.Options{
		AccessLog: slog.New(slog.NewJSONHandler(li.writer(false), nil)),
		WafLog:    slog.New(slog.NewJSONHandler(li.writer(true), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	srv, err := frontdoor.New(cfg, p, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return srv.Addrs()[0].String()
}

// buildRequest writes a stage's request as go-ftw does: the request line,
// the headers in file order, and with autocomplete_headers (the default)
// a form-encoded Content-Type and escaping for plain form data, plus
// Connection: close and Content-Length. Multipart bodies get CRLF lines.
func buildRequest(in ftwInput) ([]byte, string, error) {
	method := "GET"
	if in.Method != nil {
		method = *in.Method
	}
	if in.EncodedRequest != "" {
		raw, err := base64.StdEncoding.DecodeString(in.EncodedRequest)
		if err != nil {
			return nil, "", err
		}
		m, _, _ := strings.Cut(string(raw), " ")
		return raw, m, nil
	}
	uri, version := "/", "HTTP/1.1"
	if in.URI != nil {
		uri = *in.URI
	}
	if in.Version != nil {
		version = *in.Version
	}
	auto := in.AutocompleteHeaders == nil || *in.AutocompleteHeaders
	type hdr struct{ k, v string }
	var headers []hdr
	has := func(name string) bool {
		for _, h := range headers {
			if strings.EqualFold(h.k, name) {
				return true
			}
		}
		return false
	}
	hn := in.Headers
	for i := 0; i+1 < len(hn.Content); i += 2 {
		headers = append(headers, hdr{hn.Content[i].Value, hn.Content[i+1].Value})
	}
	var data []byte
	if in.Data != nil {
		data = renderData(*in.Data)
	}
	if len(data) > 0 && auto {
		if !has("Content-Type") {
			headers = append(headers, hdr{"Content-Type", "application/x-www-form-urlencoded"})
		}
		for _, h := range headers {
			if strings.EqualFold(h.k, "Content-Type") && h.v == "application/x-www-form-urlencoded" {
				data = formEncode(data)
				break
			}
		}
	}
	for _, h := range headers {
		if strings.EqualFold(h.k, "Content-Type") && strings.Contains(h.v, "multipart/form-data;") {
			data = bytes.ReplaceAll(data, []byte("\n"), []byte("\r\n"))
			break
		}
	}
	if auto {
		if !has("Connection") {
			headers = append(headers, hdr{"Connection", "close"})
		}
		if !has("Content-Length") && (len(data) > 0 || bodyMethod.MatchString(method)) {
			headers = append(headers, hdr{"Content-Length", strconv.Itoa(len(data))})
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s %s\r\n", method, uri, version)
	for _, h := range headers {
		fmt.Fprintf(&b, "%s: %s\r\n", h.k, h.v)
	}
	b.WriteString("\r\n")
	b.Write(data)
	return b.Bytes(), method, nil
}

// renderData expands data as a Go template, as go-ftw does (with sprig's
// functions there; these tests use only repeat). Like go-ftw, data that is
// not a valid template is sent as no body at all.
func renderData(s string) []byte {
	tpl, err := template.New("ftw").Funcs(template.FuncMap{
		"repeat": func(n int, s string) string { return strings.Repeat(s, n) },
	}).Parse(s)
	if err != nil {
		return nil
	}
	var b bytes.Buffer
	if err := tpl.Execute(&b, nil); err != nil {
		return nil
	}
	return b.Bytes()
}

var bodyMethod = regexp.MustCompile(`^POST|PUT|PATCH|DELETE$`)

// formEncode escapes the keys and values of form data that is not escaped
// yet (unescaping would not change it), as go-ftw does.
func formEncode(data []byte) []byte {
	if u, err := url.QueryUnescape(string(data)); err != nil || u != string(data) {
		return data
	}
	var parts []string
	for tok := range strings.SplitSeq(string(data), "&") {
		k, v, ok := strings.Cut(tok, "=")
		if !ok {
			parts = append(parts, url.QueryEscape(tok))
			continue
		}
		parts = append(parts, url.QueryEscape(k)+"="+url.QueryEscape(v))
	}
	return []byte(strings.Join(parts, "&"))
}

// stageResult is what one stage's request produced.
type stageResult struct {
	status  int
	err     error
	trace   string
	ids     map[int]bool
	logText string
}

func send(addr string, in ftwInput, li *logIndex) stageResult {
	raw, method, err := buildRequest(in)
	if err != nil {
		return stageResult{err: err}
	}
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return stageResult{err: err}
	}
	defer conn.Close()
	// CRS at paranoia 4 takes seconds over a 64 KB argument (920390).
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := conn.Write(raw); err != nil {
		return stageResult{err: err}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		return stageResult{err: err}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	res := stageResult{status: resp.StatusCode, trace: resp.Header.Get("X-Tether-Trace-Id"), ids: map[int]bool{}}
	if res.trace == "" {
		return res // answered before the data path (net/http's own 4xx)
	}
	lines, ok := li.waitDone(res.trace)
	if !ok {
		res.err = fmt.Errorf("no access line for trace %s", res.trace)
	}
	var text strings.Builder
	for _, l := range lines {
		for _, id := range l.RuleIDs {
			res.ids[id] = true
		}
		for _, r := range l.Rules {
			fmt.Fprintf(&text, "[id %q] [msg %q] [data %q]\n", strconv.Itoa(r.ID), r.Msg, r.Data)
		}
	}
	res.logText = text.String()
	return res
}

// check compares a stage's result with its expected output, go-ftw's way.
func check(out ftwOutput, res stageResult) error {
	if out.ExpectError != nil {
		if *out.ExpectError != (res.err != nil) {
			return fmt.Errorf("expect_error %v, got err %v", *out.ExpectError, res.err)
		}
		return nil
	}
	if res.err != nil {
		return res.err
	}
	if out.Status != 0 && out.Status != res.status {
		return fmt.Errorf("status %d, want %d", res.status, out.Status)
	}
	var missing, unwanted []int
	for _, id := range out.Log.ExpectIDs {
		if !res.ids[id] {
			missing = append(missing, id)
		}
	}
	for _, id := range out.Log.NoExpectIDs {
		if res.ids[id] {
			unwanted = append(unwanted, id)
		}
	}
	if len(missing) > 0 || len(unwanted) > 0 {
		return fmt.Errorf("expected ids %v missing, unexpected ids %v present (status %d, trace %q, triggered %v)",
			missing, unwanted, res.status, res.trace, sortedIDs(res.ids))
	}
	if out.Log.MatchRegex != "" && !regexp.MustCompile(out.Log.MatchRegex).MatchString(res.logText) {
		return fmt.Errorf("audit log does not match %q", out.Log.MatchRegex)
	}
	if out.Log.NoMatchRegex != "" && regexp.MustCompile(out.Log.NoMatchRegex).MatchString(res.logText) {
		return fmt.Errorf("audit log matches %q", out.Log.NoMatchRegex)
	}
	return nil
}

func sortedIDs(m map[int]bool) []int {
	ids := make([]int, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

func runCase(addr string, c crsCase, li *logIndex) error {
	for i, st := range c.test.Stages {
		err := check(st.Output, send(addr, st.Input, li))
		if err != nil && st.Output.RetryOnce {
			err = check(st.Output, send(addr, st.Input, li))
		}
		if err != nil {
			return fmt.Errorf("stage %d: %v", i, err)
		}
	}
	return nil
}

// TestCRSRegression sends the CRS's regression tests through tether and
// checks its audit log: every test Coraza's own CRS run passes passes here.
func TestCRSRegression(t *testing.T) {
	cases, ignored := loadCases(t)
	full := os.Getenv("TETHER_CRS_FULL") != ""
	if !full {
		cases = subset(cases)
	}
	if only := os.Getenv("TETHER_CRS_ONLY"); only != "" { // e.g. "^920390-"
		re := regexp.MustCompile(only)
		cases = slices.DeleteFunc(cases, func(c crsCase) bool { return !re.MatchString(c.id) })
	}
	li := &logIndex{access: map[string]bool{}, audit: map[string][]auditLine{}}
	addr := startTether(t, li)

	start := time.Now()
	var run []crsCase
	skipped := 0
	for _, c := range cases {
		if reason, ok := ignored[c.id]; ok {
			skipped++
			t.Logf("skip %s (ignored by Coraza's run: %s)", c.id, reason)
			continue
		}
		run = append(run, c)
	}
	// A few requests at a time: results are told apart by trace id.
	errs := make([]error, len(run))
	next := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = runCase(addr, run[i], li)
			}
		}()
	}
	for i := range run {
		next <- i
	}
	close(next)
	wg.Wait()
	passed := 0
	var failed []string
	for i, err := range errs {
		if err != nil {
			failed = append(failed, run[i].id)
			t.Errorf("%s (%s): %v", run[i].id, run[i].file, err)
			continue
		}
		passed++
	}
	t.Logf("CRS regression (full=%v): %d run, %d passed, %d failed, %d skipped as Coraza skips them, in %v",
		full, len(cases), passed, len(failed), skipped, time.Since(start).Round(time.Millisecond))
	if len(failed) > 0 {
		t.Logf("failed: %s", strings.Join(failed, " "))
	}
}
