package config

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
)

// Load reads a configuration file; its format follows the extension (.yaml
// or .yml: YAML, anything else: JSON). See Parse.
func Load(path string) (*Config, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, Errors{{Path: "$", Message: err.Error()}}
	}
	format := "json"
	if ext := strings.ToLower(filepath.Ext(path)); ext == ".yaml" || ext == ".yml" {
		format = "yaml"
	}
	return Parse(data, format)
}

// Parse decodes, validates and completes a configuration in format "json"
// or "yaml". Warnings name keys that are accepted but not implemented. The
// error, when not nil, is an Errors listing every problem with its path;
// the Config is then nil. A returned Config has every default filled in.
func Parse(data []byte, format string) (*Config, []string, error) {
	tree, err := parseTree(data, format)
	if err != nil {
		return nil, nil, Errors{{Path: "$", Message: err.Error()}}
	}
	if tree.kind == kindNull {
		tree = &node{kind: kindObject} // an empty YAML document is an empty config
	}
	dropSchema(tree)
	var c Config
	d := &decoder{}
	d.decode("", tree, reflect.ValueOf(&c).Elem())

	v := &validator{errs: d.errs, warns: d.warns}
	fillIDs(&c)
	v.listeners(&c)
	v.config(&c)
	if len(v.errs) > 0 {
		return nil, v.warns, v.errs
	}
	applyDefaults(&c)
	return &c, v.warns, nil
}

// dropSchema removes a top-level "$schema" key, which editors such as VS
// Code add to point at a JSON schema; it is not configuration.
func dropSchema(n *node) {
	if n.kind != kindObject {
		return
	}
	for i := 0; i < len(n.keys); i++ {
		if strings.EqualFold(n.keys[i], "$schema") {
			n.keys = slices.Delete(n.keys, i, i+1)
			n.vals = slices.Delete(n.vals, i, i+1)
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

// listeners turns ASP.NET's Urls into Listeners when Listeners is absent,
// and falls back to one HTTP listener on :8080 when both are.
func (v *validator) listeners(c *Config) {
	urls := strings.TrimSpace(c.Urls)
	switch {
	case len(c.Listeners) > 0:
		if urls != "" {
			v.warns = append(v.warns, "Urls: ignored because Listeners is set")
		}
		return
	case urls == "":
		c.Listeners = []Listener{{Address: ":8080"}}
		return
	}
	for u := range strings.SplitSeq(urls, ";") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		addr, err := urlToAddress(u)
		if err != nil {
			v.errorf("Urls", "%q: %v", u, err)
			continue
		}
		c.Listeners = append(c.Listeners, Listener{Address: addr})
	}
}

// urlToAddress reads ASP.NET listen URLs: http://*:8080, http://+:80,
// http://localhost:5000, http://[::1]:5000. "*", "+" and unspecified
// addresses bind every interface.
func urlToAddress(u string) (string, error) {
	scheme, rest, ok := strings.Cut(u, "://")
	switch {
	case !ok:
		return "", fmt.Errorf("want scheme://host:port")
	case strings.EqualFold(scheme, "https"):
		return "", fmt.Errorf("https in Urls needs Listeners with a Certificate")
	case !strings.EqualFold(scheme, "http"):
		return "", fmt.Errorf("scheme %q not supported (want http)", scheme)
	}
	hostport, _, _ := strings.Cut(rest, "/")
	host, port := hostport, "80"
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, port = h, p
	} else if strings.HasPrefix(hostport, "[") && strings.HasSuffix(hostport, "]") {
		host = hostport[1 : len(hostport)-1]
	}
	switch host {
	case "*", "+", "0.0.0.0", "::", "":
		host = ""
	}
	addr := net.JoinHostPort(host, port)
	if err := checkHostPort(addr); err != nil {
		return "", err
	}
	return addr, nil
}
