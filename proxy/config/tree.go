package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/tailscale/hujson"
	"go.yaml.in/yaml/v3"
)

// node is the format-neutral tree both JSON and YAML are read into before
// the typed decode, so the two formats follow exactly the same rules.
// Like .NET configuration, scalars keep their text: "5", 5 and '5' are alike.
type node struct {
	kind kind
	text string   // scalar text
	keys []string // object keys, in file order (duplicates kept)
	vals []*node  // object values or list elements
}

type kind int

const (
	kindNull kind = iota
	kindScalar
	kindObject
	kindList
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

func parseTree(data []byte, format string) (*node, error) {
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
			return &node{kind: kindNull}, nil
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

func fromJSON(v hujson.Value, budget *int) (*node, error) {
	if *budget--; *budget < 0 {
		return nil, errTooBig
	}
	switch t := v.Value.(type) {
	case hujson.Literal:
		switch t.Kind() {
		case 'n':
			return &node{kind: kindNull}, nil
		case '"':
			var s string
			if err := json.Unmarshal(t, &s); err != nil {
				return nil, fmt.Errorf("invalid JSON string %s: %v", t, err)
			}
			return &node{kind: kindScalar, text: s}, nil
		default:
			return &node{kind: kindScalar, text: string(t)}, nil
		}
	case *hujson.Object:
		n := &node{kind: kindObject}
		for _, m := range t.Members {
			name, _ := m.Name.Value.(hujson.Literal)
			val, err := fromJSON(m.Value, budget)
			if err != nil {
				return nil, err
			}
			n.keys = append(n.keys, name.String())
			n.vals = append(n.vals, val)
		}
		return n, nil
	case *hujson.Array:
		n := &node{kind: kindList}
		for _, e := range t.Elements {
			val, err := fromJSON(e, budget)
			if err != nil {
				return nil, err
			}
			n.vals = append(n.vals, val)
		}
		return n, nil
	}
	return nil, fmt.Errorf("invalid JSON value")
}

func fromYAML(y *yaml.Node, budget *int, depth int) (*node, error) {
	if *budget--; *budget < 0 {
		return nil, errTooBig
	}

	switch y.Kind {
	case yaml.DocumentNode:
		if len(y.Content) == 0 {
			return &node{kind: kindNull}, nil
		}
		return fromYAML(y.Content[0], budget, depth)
	case yaml.AliasNode:
		if y.Alias == nil {
			return nil, errors.New("invalid YAML alias")
		}
		return fromYAML(y.Alias, budget, depth)
	case yaml.ScalarNode:
		if y.ShortTag() == "!!null" {
			return &node{kind: kindNull}, nil
		}
		return &node{kind: kindScalar, text: y.Value}, nil
	case yaml.MappingNode:
		if depth >= maxDepth {
			return nil, errTooDeep
		}
		n := &node{kind: kindObject}
		for i := 0; i+1 < len(y.Content); i += 2 {
			k := y.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("YAML line %d: mapping keys must be plain scalars", k.Line)
			}
			val, err := fromYAML(y.Content[i+1], budget, depth+1)
			if err != nil {
				return nil, err
			}
			n.keys = append(n.keys, k.Value)
			n.vals = append(n.vals, val)
		}
		return n, nil
	case yaml.SequenceNode:
		if depth >= maxDepth {
			return nil, errTooDeep
		}
		n := &node{kind: kindList}
		for _, e := range y.Content {
			val, err := fromYAML(e, budget, depth+1)
			if err != nil {
				return nil, err
			}
			n.vals = append(n.vals, val)
		}
		return n, nil
	case 0: // empty document
		return &node{kind: kindNull}, nil
	}
	return nil, fmt.Errorf("unsupported YAML node at line %d", y.Line)
}

// describe names a node in error messages; long scalars are shortened.
func (n *node) describe() string {
	switch n.kind {
	case kindNull:
		return "null"
	case kindObject:
		return "an object"
	case kindList:
		return "a list"
	}
	s := n.text
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return fmt.Sprintf("%q", s)
}
