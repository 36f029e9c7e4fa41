package keyring_test

import (
	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/proxy/affinity"
)

// The data path seals and opens affinity values through this interface.
var _ affinity.Keyring = (*keyring.Ring)(nil)
