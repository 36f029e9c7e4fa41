// Package transform compiles YARP's route transform dictionaries
// (config Route.Transforms) into a Transforms value that the data
// path applies to each outgoing request, each backend response and its
// trailers.
//
// Every transform of YARP's transforms documentation is implemented with
// YARP's keys (matched case-insensitively like .NET configuration) and
// semantics, except X-Forwarded and Forwarded, which package proxy
// compiles because they need the peer's trust and the connection:
//
//   - path: PathRemovePrefix, PathPrefix, PathSet, PathPattern (a route
//     template filled with the request's route values, which
//     route.Template.Values reads from the route's Match.Path);
//   - query: QueryValueParameter and QueryRouteParameter (Set or Append),
//     QueryRemoveParameter; once one changes the query it is rebuilt as
//     ASP.NET's QueryBuilder writes it (names case-insensitive, values
//     encoded like .NET's UrlEncoder.Default);
//   - HttpMethodChange with Set;
//   - request headers: RequestHeader and RequestHeaderRouteValue (Set or
//     Append), RequestHeaderRemove, RequestHeadersAllowed,
//     RequestHeadersCopy, RequestHeaderOriginalHost, ClientCert;
//   - response headers: ResponseHeader (Set or Append), ResponseHeaderRemove,
//     ResponseHeadersAllowed, ResponseHeadersCopy;
//   - response trailers: ResponseTrailer, ResponseTrailerRemove,
//     ResponseTrailersAllowed, ResponseTrailersCopy.
//
// Response and trailer transforms take an optional When (Success, the
// default: status below 400; Always; Failure); response header transforms
// also run on the errors tether answers itself (ApplyError), as YARP's do. As in YARP, with copying
// off (…Copy false, or an …Allowed list) an Append still finds the
// client's or backend's own value. Anything else is a compile error naming
// the offending dictionary by its JSON path.
//
// Compiling does all parsing and header-name canonicalisation up front, so
// applying a transform does no parsing and few allocations per request;
// route values are only read for routes whose transforms use them.
package transform
