package tree

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/tailscale/hujson"
	"go.yaml.in/yaml/v3"
)

// Node is the format-neutral tree both JSON and YAML are read into before
// the typed decode, so the two formats follow exactly the same rules.
// Like .NET configuration, scalars keep their text: "5", 5 and '5' are alike.
type Node struct {
	Kind Kind
	Text string   // scalar text
	Keys []string // object keys, in file order (duplicates kept)
	Vals []*Node  // object values or list elements
}

// Kind is what a Node holds.
type Kind int

// The kinds of Node.
const (
	Null Kind = iota
	Scalar
	Object
	List
)

// maxNodes bounds the tree so YAML alias expansion cannot blow up.
const maxNodes = 100_000

// maxDepth bounds nesting: hujson parses recursively, and a file of a
// million '[' overflows the goroutine stack, which is fatal, not a panic.
const maxDepth = 1000

var (
	errTooBig   = errors.New("document too large (more than 100000 values after alias expansion)")
	errTooDeep  = fmt.Errorf("nested more than %d levels deep", maxDepth)
	errMultiDoc = errors.New("more than one YAML document")
)

// utf8BOM starts files saved by Visual Studio; both formats skip it.
const utf8BOM = "\xef\xbb\xbf"

// Parse reads data, in format "json" (with comments and trailing commas)
// or "yaml", into a tree. A file that does not parse is a *SyntaxError.
func Parse(data []byte, format string) (*Node, error) {
	budget := maxNodes
	data = bytes.TrimPrefix(data, []byte(utf8BOM))
	switch format {
	case "json":
		if jsonDepth(data) > maxDepth {
			return nil, errTooDeep
		}
		v, err := hujson.Parse(data)
		if err != nil {
			return nil, jsonSyntaxError(err)
		}
		return fromJSON(v, &budget)
	case "yaml":
		// go-yaml stops at 10000 levels itself; fromYAML applies maxDepth
		// (after alias expansion) so both formats take the same files.
		dec := yaml.NewDecoder(bytes.NewReader(data))
		var doc yaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return &Node{Kind: Null}, nil
		} else if err != nil {
			return nil, yamlSyntaxError(err)
		}
		var next yaml.Node
		if err := dec.Decode(&next); err == nil {
			return nil, errMultiDoc
		} else if !errors.Is(err, io.EOF) {
			return nil, yamlSyntaxError(err)
		}
		return fromYAML(&doc, &budget, 0)
	default:
		return nil, fmt.Errorf("unknown format %q (want json or yaml)", format)
	}
}

// jsonDepth returns the deepest nesting of objects and arrays in JWCC text
// (JSON with comments), skipping strings and comments. It stops counting
// once past maxDepth.
func jsonDepth(data []byte) int {
	depth, deepest := 0, 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++ // the escaped byte cannot end the string
				}
			}
		case '/':
			switch {
			case i+1 < len(data) && data[i+1] == '/':
				for i += 2; i < len(data) && data[i] != '\n'; i++ {
				}
			case i+1 < len(data) && data[i+1] == '*':
				end := bytes.Index(data[i+2:], []byte("*/"))
				if end < 0 {
					return deepest // unterminated: hujson reports it
				}
				i += 2 + end + 1
			}
		case '[', '{':
			if depth++; depth > deepest {
				deepest = depth
				if deepest > maxDepth {
					return deepest
				}
			}
		case ']', '}':
			depth = max(depth-1, 0) // unbalanced: hujson reports it
		}
	}
	return deepest
}

func fromJSON(v hujson.Value, budget *int) (*Node, error) {
	if *budget--; *budget < 0 {
		return nil, errTooBig
	}
	switch t := v.Value.(type) {
	case hujson.Literal:
		switch t.Kind() {
		case 'n':
			return &Node{Kind: Null}, nil
		case '"':
			var s string
			if err := json.Unmarshal(t, &s); err != nil {
				return nil, fmt.Errorf("invalid JSON string %s: %v", t, err)
			}
			return &Node{Kind: Scalar, Text: s}, nil
		default:
			return &Node{Kind: Scalar, Text: string(t)}, nil
		}
	case *hujson.Object:
		n := &Node{Kind: Object}
		for _, m := range t.Members {
			name, _ := m.Name.Value.(hujson.Literal)
			val, err := fromJSON(m.Value, budget)
			if err != nil {
				return nil, err
			}
			n.Keys = append(n.Keys, name.String())
			n.Vals = append(n.Vals, val)
		}
		return n, nil
	case *hujson.Array:
		n := &Node{Kind: List}
		for _, e := range t.Elements {
			val, err := fromJSON(e, budget)
			if err != nil {
				return nil, err
			}
			n.Vals = append(n.Vals, val)
		}
		return n, nil
	}
	return nil, fmt.Errorf("invalid JSON value")
}

func fromYAML(y *yaml.Node, budget *int, depth int) (*Node, error) {
	if *budget--; *budget < 0 {
		return nil, errTooBig
	}

	switch y.Kind {
	case yaml.DocumentNode:
		if len(y.Content) == 0 {
			return &Node{Kind: Null}, nil
		}
		return fromYAML(y.Content[0], budget, depth)
	case yaml.AliasNode:
		if y.Alias == nil {
			return nil, errors.New("invalid YAML alias")
		}
		return fromYAML(y.Alias, budget, depth)
	case yaml.ScalarNode:
		if y.ShortTag() == "!!null" {
			return &Node{Kind: Null}, nil
		}
		return &Node{Kind: Scalar, Text: y.Value}, nil
	case yaml.MappingNode:
		if depth >= maxDepth {
			return nil, errTooDeep
		}
		n := &Node{Kind: Object}
		for i := 0; i+1 < len(y.Content); i += 2 {
			k := y.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("YAML line %d: mapping keys must be plain scalars", k.Line)
			}
			val, err := fromYAML(y.Content[i+1], budget, depth+1)
			if err != nil {
				return nil, err
			}
			n.Keys = append(n.Keys, k.Value)
			n.Vals = append(n.Vals, val)
		}
		return n, nil
	case yaml.SequenceNode:
		if depth >= maxDepth {
			return nil, errTooDeep
		}
		n := &Node{Kind: List}
		for _, e := range y.Content {
			val, err := fromYAML(e, budget, depth+1)
			if err != nil {
				return nil, err
			}
			n.Vals = append(n.Vals, val)
		}
		return n, nil
	case 0: // empty document
		return &Node{Kind: Null}, nil
	}
	return nil, fmt.Errorf("unsupported YAML node at line %d", y.Line)
}

// Describe names a node in error messages; long scalars are shortened.
func (n *Node) Describe() string {
	switch n.Kind {
	case Null:
		return "null"
	case Object:
		return "an object"
	case List:
		return "a list"
	}
	s := n.Text
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return fmt.Sprintf("%q", s)
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

// In places the error in file as compilers and editors do
// (file:line:column: ...), so a terminal or editor can jump to it.
func (e *SyntaxError) In(file string) string {
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
