// Package route owns the route table: it compiles ReverseProxy.Routes and
// picks the route for each request (SPEC §2.1 "Routes"), following YARP and
// ASP.NET Core endpoint routing.
//
// A route matches when every criterion it sets holds: Match.Methods
// (case-insensitive), Match.Hosts, Match.Path, Match.Headers and
// Match.QueryParameters, with YARP's modes and semantics (header and query
// modes are read case-insensitively; an empty mode is ExactHeader/Exact).
//
// Paths are YARP route templates: literal segments (case-insensitive, with
// Unicode case folding), "{name}", "{name?}", "{name=default}", "{*rest}"
// and "{**rest}" (catch-all: last segment only, may match nothing), complex
// segments such as "{file}.{ext?}" (matched right to left as ASP.NET does),
// and inline constraints. The constraints int, long, bool, guid, alpha and
// required are enforced; ASP.NET's other constraint names (min, max, range,
// length, minlength, maxlength, regex, datetime, decimal, double, float,
// file, nonfile) and any constraint with arguments are accepted but not
// checked; an unknown name is an error. Plain prefixes are written
// "prefix:/api" or "/api/*" (literal text only) and mean "/api/{**rest}".
// An empty Path matches every path. The request path is matched as ASP.NET
// sees it: percent-decoded, except that %2F stays encoded in its segment.
//
// Hosts: "example.com" (case-insensitive), "*.example.com" (any sub-domain,
// not the apex), "*" (any), each optionally with ":port". A pattern with a
// port matches only that port; the request's port is the one in Host, or
// 80/443 by scheme. A pattern without a port matches any port.
//
// Precedence: SPEC says "the most specific match wins, then Order". Among
// the routes that match, the winner is the first by:
//
//  1. path precedence, as ASP.NET computes it: one digit per template
//     segment (1 literal, 2 constrained parameter or complex segment,
//     3 parameter, 4 constrained catch-all, 5 catch-all), compared segment
//     by segment, lower first, a missing segment counting as 0 (so "/a"
//     beats "/a/{**rest}", and "/a/b/{**rest}" beats "/a/{**rest}"). An
//     empty Path ranks as "/{**rest}";
//  2. then YARP's policy order: a route with Methods beats one without,
//     then one with Hosts beats one without, then more Headers win, then
//     more QueryParameters;
//  3. then lower Order;
//  4. then RouteId (ordinal), so the choice is always deterministic.
//
// ASP.NET puts Order before path precedence; tether follows the SPEC and
// uses Order only between equally specific routes.
//
// NewTable sorts the routes by this rule once and indexes them by their
// first literal segment; Match walks one list in that order and returns the
// first route that matches, without allocating for plain paths.
package route
