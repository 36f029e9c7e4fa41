// Package config owns tether's configuration file (SPEC §5): decoding JSON
// (with comments and trailing commas) or YAML into the types of types.go,
// validating it with every problem reported at its JSON path, and filling in
// the documented defaults.
//
// Decoding follows .NET configuration rather than encoding/json, so a YARP
// appsettings.json loads as it is: keys match case-insensitively, booleans
// and numbers may be strings, durations are TimeSpans ("00:00:30"), Go
// durations ("30s") or seconds. Keys YARP or ASP.NET define but tether does
// not implement (fields of type Unsupported, and some transforms) load with a
// warning; any other unknown key is an error, so typos are caught.
//
// Both formats are first read into one generic tree (tree.go) and then bound
// by reflection (decode.go), so JSON and YAML obey exactly the same rules.
package config
