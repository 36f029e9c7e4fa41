// Package waf owns tether's web application firewall (Application
// Gateway's WAF): OWASP Coraza v3 running the OWASP Core Rule Set embedded by
// coraza-coreruleset, in Detection or Prevention mode, per route.
//
// A Firewall is one compiled rule set (CRS, the Waf section's settings and
// the operator's rule files); building one takes a while, so a reload whose
// rule settings are unchanged keeps the old one. The engine always runs in
// Coraza's DetectionOnly mode and tether enforces: a route in Prevention
// answers the interruption Coraza would have made, a route in Detection
// forwards and logs. So one compiled rule set serves routes of both modes,
// and per-route exclusions are removed per transaction.
//
// A Policy is a route's compiled setting; nil when the WAF is off for the
// route, so the data path then costs one nil check and no transaction. A Tx
// follows one request from its headers (Check), through its response
// (Response, only with InspectResponses) to its end (Done), which writes the
// audit line and counts it.
//
// Files: firewall.go (building the rule set), policy.go (per-route checks,
// request body handling), response.go (response inspection), audit.go
// (audit log and metrics), fs.go (the rule files' file system).
package waf
