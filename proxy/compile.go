package proxy

import "github.com/tether-proxy/tether/proxy/config"

// Compile checks everything about cfg that building the data path needs
// (route templates, policies, affinity, transforms, destination addresses,
// TrustedProxies) without starting anything. Errors carry JSON paths. Used
// by `tether config validate` and before a reload.
func Compile(cfg *config.Config) config.Errors {
	_, errs := build(cfg, nil, nil)
	return errs
}
