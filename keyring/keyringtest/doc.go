// Package keyringtest holds keyring fixtures for other packages' tests: a
// node's cluster secrets, and a value sealed under a key nobody else holds.
// Tests only; keyring's own tests do not use it (it imports keyring).
package keyringtest
