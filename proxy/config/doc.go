// Package config owns tether's configuration file (docs/CONFIGURATION.md,
// "The configuration file"): decoding JSON (with comments and trailing
// commas) or YAML into the types of types.go, validating it with every
// problem reported at its JSON path, and filling in the documented defaults.
//
// Decoding follows .NET configuration rather than encoding/json, so a YARP
// appsettings.json loads as it is: a UTF-8 BOM is skipped, keys match
// case-insensitively, booleans and numbers may be strings, and durations are
// TimeSpans ("00:00:30") or Go durations ("30s"). A bare integer duration is
// days, as in .NET ("5" is 5 days), with a warning. Keys YARP or ASP.NET
// define but tether does not implement (fields of type Unsupported, and some
// transforms) load with a warning; a top-level "$schema" is ignored. Any
// other unknown key is a warning naming its path and the nearest known key,
// or an error with LoadOptions.Strict; top-level sections of the
// application's own are ignored with an info line (unknown.go). A duration key that is
// present, even as zero, has Duration.Set, so defaults fill in only absent
// keys.
//
// Untrusted input is bounded: nesting deeper than 1000 levels, more than
// 100000 values after YAML alias expansion, and YAML with more than one
// document are refused.
//
// Beyond the types: kestrel.go turns Kestrel's Endpoints, Certificates
// and Limits, Urls and ASPNETCORE_URLS into Listeners with ASP.NET's
// precedence; pfx.go loads PEM and PKCS#12 certificates; policy.go refuses
// route policies tether cannot enforce; cookierules.go warns where browsers
// would drop an affinity cookie; protocol.go reads the HTTP and TLS
// versions to backends.
//
// Both formats are first read into one generic tree (package tree) and
// then bound by reflection (decode.go), so JSON and YAML obey exactly the
// same rules.
package config
