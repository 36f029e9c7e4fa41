package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"

	"github.com/tether-proxy/tether/proxy/config/tree"
)

// LoadOptions change how a configuration is read. The zero value is what
// Load and Parse use.
type LoadOptions struct {
	// Strict makes keys that neither tether, YARP nor ASP.NET defines errors
	// instead of warnings (--strict, TETHER_STRICT). Top-level sections of
	// the application's own stay ignored.
	Strict bool
	// Info, when set, receives the info lines of a load: one per top-level
	// section ignored as the application's own.
	Info func(msg string)
	// Listen, when not empty, replaces the file's listeners (Listeners,
	// Kestrel.Endpoints, Urls): each entry is host:port, :port, or a URL as
	// in Urls (--listen, TETHER_LISTEN).
	Listen []string
	// LookupEnv reads the environment (ASPNETCORE_URLS); nil means
	// os.LookupEnv.
	LookupEnv func(key string) (string, bool)
	// ReverseProxy, when not nil, replaces the file's ReverseProxy section
	// (JSON: the cluster's version of it, which every node serves with its
	// own file's other sections).
	ReverseProxy []byte

	// baseDir resolves relative Kestrel certificate paths, as Kestrel's
	// content root: the config file's directory (Load), else the working
	// directory.
	baseDir string
	// file names the file a syntax error is in (Load).
	file string
}

// Load reads a configuration file; its format follows the extension (.yaml
// or .yml: YAML, anything else: JSON). See Parse.
func Load(path string) (*Config, []string, error) {
	return LoadWith(path, LoadOptions{})
}

// LoadWith is Load with options.
func LoadWith(path string, opts LoadOptions) (*Config, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, Errors{{Message: readError(path, err)}}
	}
	format := "json"
	if ext := strings.ToLower(filepath.Ext(path)); ext == ".yaml" || ext == ".yml" {
		format = "yaml"
	}
	opts.baseDir = filepath.Dir(path)
	opts.file = path
	return ParseWith(data, format, opts)
}

// readError says why the file at path could not be read, in an operator's
// words rather than the system call's ("open x: no such file or
// directory").
func readError(path string, err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return path + ": no such file"
	case errors.Is(err, fs.ErrPermission):
		return path + ": permission denied: tether cannot read it"
	case errors.Is(err, syscall.EISDIR):
		return path + ": is a directory, not a configuration file"
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Sprintf("%s: cannot read it: %v", path, err)
}

// Parse decodes, validates and completes a configuration in format "json"
// or "yaml". Warnings name keys that are accepted but not implemented. The
// error, when not nil, is an Errors listing every problem with its path;
// the Config is then nil. A returned Config has every default filled in.
func Parse(data []byte, format string) (*Config, []string, error) {
	return ParseWith(data, format, LoadOptions{})
}

// ParseWith is Parse with options.
func ParseWith(data []byte, format string, opts LoadOptions) (*Config, []string, error) {
	root, err := tree.Parse(data, format)
	if se, ok := err.(*SyntaxError); ok {
		if opts.file != "" {
			return nil, nil, Errors{{Message: se.In(opts.file)}}
		}
		return nil, nil, Errors{{Message: se.Error()}}
	} else if err != nil {
		return nil, nil, Errors{{Path: "$", Message: err.Error()}}
	}
	if root.Kind == tree.Null {
		root = &tree.Node{Kind: tree.Object} // an empty YAML document is an empty config
	}
	if opts.ReverseProxy != nil && root.Kind == tree.Object {
		section, err := tree.Parse(opts.ReverseProxy, "json")
		if err != nil {
			return nil, nil, Errors{{Path: "ReverseProxy", Message: "the cluster's version: " + err.Error()}}
		}
		replaceSection(root, "ReverseProxy", section)
	}
	dropSchema(root)
	var c Config
	d := &decoder{strict: opts.Strict}
	d.decode("", root, reflect.ValueOf(&c).Elem())
	if opts.Info != nil {
		for _, m := range d.infos {
			opts.Info(m)
		}
	}

	v := &validator{errs: d.errs, warns: d.warns}
	fillIDs(&c)
	v.kestrelLimits(&c)
	v.config(&c)
	v.buildListeners(&c, opts)
	v.clientCertListeners(&c) // transform.go
	v.secureCookiesOverHTTP(&c)
	for _, id := range sortedKeys(c.ReverseProxy.Routes) {
		r, path := c.ReverseProxy.Routes[id], "ReverseProxy.Routes."+id
		v.routePolicies(path, r)
		if r.SessionAffinity != nil {
			v.cookieRules(path+".SessionAffinity", r.SessionAffinity)
		}
	}
	for _, id := range sortedKeys(c.ReverseProxy.Clusters) {
		cl, path := c.ReverseProxy.Clusters[id], "ReverseProxy.Clusters."+id
		v.cookieRules(path+".SessionAffinity", &cl.SessionAffinity)
		v.httpVersion(path+".HttpRequest", &cl.HttpRequest)
	}
	if len(v.errs) > 0 {
		return nil, v.warns, v.errs
	}
	applyDefaults(&c)
	return &c, v.warns, nil
}

// dropSchema removes a top-level "$schema" key, which editors such as VS
// Code add to point at a JSON schema; it is not configuration.
// replaceSection puts section under key in the object n, in place of every
// key that names it (keys are case-insensitive, as in ASP.NET).
func replaceSection(n *tree.Node, key string, section *tree.Node) {
	for i := 0; i < len(n.Keys); i++ {
		if strings.EqualFold(n.Keys[i], key) {
			n.Keys = slices.Delete(n.Keys, i, i+1)
			n.Vals = slices.Delete(n.Vals, i, i+1)
			i--
		}
	}
	n.Keys = append(n.Keys, key)
	n.Vals = append(n.Vals, section)
}

func dropSchema(n *tree.Node) {
	if n.Kind != tree.Object {
		return
	}
	for i := 0; i < len(n.Keys); i++ {
		if strings.EqualFold(n.Keys[i], "$schema") {
			n.Keys = slices.Delete(n.Keys, i, i+1)
			n.Vals = slices.Delete(n.Vals, i, i+1)
			i--
		}
	}
}

// fillIDs copies each map key into the entry's id, as YARP does.
func fillIDs(c *Config) {
	for id, r := range c.ReverseProxy.Routes {
		r.RouteId = id
	}
	for id, cl := range c.ReverseProxy.Clusters {
		cl.ClusterId = id
		for did, d := range cl.Destinations {
			d.DestinationId = did
		}
	}
}
