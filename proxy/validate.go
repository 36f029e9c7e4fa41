package proxy

import "github.com/tether-proxy/tether/proxy/config"

// Parse runs Compile on every config it decodes, also one with other
// errors, so that `tether config validate` and a reload list the data
// path's errors (route templates, transforms, affinity) together with the
// rest instead of only once the rest is fixed.
func init() {
	config.AddCheck(func(c *config.Config) config.Errors { return Compile(c) })
}
