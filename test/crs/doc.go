// Package crs runs the OWASP CRS's own regression suite (the YAML tests
// shipped by coraza-coreruleset) against a running tether in Detection
// mode: each test's request goes through tether's listener and data path to
// a small reflecting backend (CRS's albedo endpoints), and the expected and
// unexpected rule ids are checked in tether's WAF audit log. Tests that
// Coraza's own CRS run ignores are skipped, and its expectation overrides
// apply (testdata/ftw.yml and testdata/ftw-overrides.yml, from
// corazawaf/coraza's testing/coreruleset).
//
// `go test ./test/crs/` runs a fixed representative subset (the first
// tests of every rule file); TETHER_CRS_FULL=1 (make crs) runs all of them.
package crs
