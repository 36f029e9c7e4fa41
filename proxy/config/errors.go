package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// FieldError is one problem in a configuration, located by its JSON path
// (e.g. "ReverseProxy.Clusters.c1.SessionAffinity.AffinityKeyName").
type FieldError struct {
	Path    string
	Message string
}

func (e FieldError) Error() string {
	if e.Path == "" {
		return e.Message
	}
	return e.Path + ": " + e.Message
}

// Errors is every problem found in a configuration; it is an error itself.
type Errors []FieldError

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// SyntaxError is a file that does not parse as JSON or YAML, told in the
// operator's words (not the parser's) at its line and column.
type SyntaxError struct {
	Format string // "JSON" or "YAML"
	Line   int    // 1-based; 0 when the parser gives none
	Column int    // 1-based; 0 when the parser gives none (YAML)
	Msg    string // what is wrong
}

func (e *SyntaxError) Error() string {
	switch {
	case e.Line == 0:
		return "invalid " + e.Format + ": " + e.Msg
	case e.Column == 0:
		return fmt.Sprintf("line %d: invalid %s: %s", e.Line, e.Format, e.Msg)
	}
	return fmt.Sprintf("line %d, column %d: invalid %s: %s", e.Line, e.Column, e.Format, e.Msg)
}

// in places the error in file as compilers and editors do
// (file:line:column: ...), so a terminal or editor can jump to it.
func (e *SyntaxError) in(file string) string {
	switch {
	case e.Line == 0:
		return fmt.Sprintf("%s: invalid %s: %s", file, e.Format, e.Msg)
	case e.Column == 0:
		return fmt.Sprintf("%s:%d: invalid %s: %s", file, e.Line, e.Format, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: invalid %s: %s", file, e.Line, e.Column, e.Format, e.Msg)
}

var (
	hujsonPos = regexp.MustCompile(`^hujson: line (\d+), column (\d+): (.*)$`)
	yamlPos   = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)
	// hujson's words for what it found where, and ours.
	hujsonWords = []struct {
		re   *regexp.Regexp
		says string // with $1 the character found
	}{
		{regexp.MustCompile(`^invalid character '\\'' at start of value$`), "strings take double quotes, not '"},
		{regexp.MustCompile(`^invalid character (.+) at start of value$`), "a value is missing before $1"},
		{regexp.MustCompile(`^invalid character (.+) after object value \(expecting ',' or '}'\)$`), "a ',' or '}' is missing before $1"},
		{regexp.MustCompile(`^invalid character (.+) after array value \(expecting ',' or ']'\)$`), "a ',' or ']' is missing before $1"},
		{regexp.MustCompile(`^invalid character (.+) after object name$`), "a ':' is missing after the key, before $1"},
		{regexp.MustCompile(`^invalid character (.+) at start of object name$`), "a key in double quotes is expected, not $1"},
		{regexp.MustCompile(`^invalid character (.+) after top-level value$`), "unexpected $1 after the end of the document (one '}' too many?)"},
		{regexp.MustCompile(`^invalid character (.+) in (?:line|block) comment$`), "invalid character $1 in a comment"},
		{regexp.MustCompile(`^parsing comment: unexpected EOF$`), "a /* comment is not closed with */"},
		{regexp.MustCompile(`^parsing string: unexpected EOF$`), "the file ends inside a string (a '\"' is missing)"},
		{regexp.MustCompile(`^parsing .*: unexpected EOF$`), "the file ends before the JSON does (a '}' or ']' is missing)"},
		{regexp.MustCompile(`^invalid literal: (.+)$`), "$1 is not a JSON value: keys and strings take double quotes (true, false, null and numbers do not)"},
	}
)

// jsonSyntaxError turns hujson's error into a SyntaxError: its position,
// and what is wrong without the parser's name or jargon.
func jsonSyntaxError(err error) *SyntaxError {
	msg := err.Error()
	m := hujsonPos.FindStringSubmatch(msg)
	if m == nil {
		return &SyntaxError{Format: "JSON", Msg: strings.TrimPrefix(msg, "hujson: ")}
	}
	line, _ := strconv.Atoi(m[1])
	col, _ := strconv.Atoi(m[2])
	what := m[3]
	for _, w := range hujsonWords {
		if w.re.MatchString(what) {
			what = w.re.ReplaceAllString(what, w.says)
			break
		}
	}
	return &SyntaxError{Format: "JSON", Line: line, Column: col, Msg: what}
}

// yamlSyntaxError turns go-yaml's "yaml: line N: ..." into a SyntaxError.
func yamlSyntaxError(err error) *SyntaxError {
	msg := err.Error()
	if m := yamlPos.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &SyntaxError{Format: "YAML", Line: line, Msg: m[2]}
	}
	return &SyntaxError{Format: "YAML", Msg: strings.TrimPrefix(msg, "yaml: ")}
}
