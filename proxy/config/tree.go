package config

import (
	"encoding/json"
	"errors"
	"fmt"

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

var errTooBig = errors.New("document too large (more than 100000 values after alias expansion)")

func parseTree(data []byte, format string) (*node, error) {
	budget := maxNodes
	switch format {
	case "json":
		v, err := hujson.Parse(data)
		if err != nil {
			return nil, fmt.Errorf("invalid JSON: %v", err)
		}
		return fromJSON(v, &budget)
	case "yaml":
		var doc yaml.Node
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("invalid YAML: %v", err)
		}
		return fromYAML(&doc, &budget)
	default:
		return nil, fmt.Errorf("unknown format %q (want json or yaml)", format)
	}
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

func fromYAML(y *yaml.Node, budget *int) (*node, error) {
	if *budget--; *budget < 0 {
		return nil, errTooBig
	}
	switch y.Kind {
	case yaml.DocumentNode:
		if len(y.Content) == 0 {
			return &node{kind: kindNull}, nil
		}
		return fromYAML(y.Content[0], budget)
	case yaml.AliasNode:
		if y.Alias == nil {
			return nil, errors.New("invalid YAML alias")
		}
		return fromYAML(y.Alias, budget)
	case yaml.ScalarNode:
		if y.ShortTag() == "!!null" {
			return &node{kind: kindNull}, nil
		}
		return &node{kind: kindScalar, text: y.Value}, nil
	case yaml.MappingNode:
		n := &node{kind: kindObject}
		for i := 0; i+1 < len(y.Content); i += 2 {
			k := y.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("YAML line %d: mapping keys must be plain scalars", k.Line)
			}
			val, err := fromYAML(y.Content[i+1], budget)
			if err != nil {
				return nil, err
			}
			n.keys = append(n.keys, k.Value)
			n.vals = append(n.vals, val)
		}
		return n, nil
	case yaml.SequenceNode:
		n := &node{kind: kindList}
		for _, e := range y.Content {
			val, err := fromYAML(e, budget)
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
