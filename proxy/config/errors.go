package config

import (
	"strings"

	"github.com/tether-proxy/tether/proxy/config/tree"
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
type SyntaxError = tree.SyntaxError
