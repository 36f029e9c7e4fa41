// Package keyringtest holds keyring fixtures for other packages' tests: a
// node's cluster secrets, a value sealed under a key nobody else holds, and
// a check that bytes hold no TLS session ticket seed in any encoding.
// Tests only; keyring's own tests do not use it (it imports keyring).
package keyringtest
