// Package transform compiles YARP's route transform dictionaries
// (config Route.Transforms, SPEC §2.1) into a Transforms value that the data
// path applies to each outgoing request and each backend response.
//
// Supported keys (YARP's names, matched case-insensitively like .NET
// configuration): PathRemovePrefix, PathPrefix, PathSet; RequestHeader with
// Set or Append; RequestHeaderRemove; RequestHeaderOriginalHost;
// RequestHeadersCopy; ResponseHeader with Set or Append and an optional When
// (Success, the default, Always, Failure); ResponseHeaderRemove with an
// optional When. The YARP transforms that config.Load accepts with a
// warning but tether does not implement (X-Forwarded, QueryValueParameter,
// ResponseTrailer, ...) are skipped; anything else is a compile error naming
// the offending dictionary by its JSON path.
//
// Compiling does all parsing and header-name canonicalisation up front, so
// applying a transform does no parsing and few allocations per request.
package transform
