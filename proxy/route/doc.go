// Package route owns the route table: it compiles ReverseProxy.Routes and
// picks the route for each request (proxy/DESIGN.md, "Routes and load
// balancing"), following YARP and ASP.NET Core endpoint routing.
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
// and inline constraints (see below). Plain prefixes are written
// "prefix:/api" or "/api/*" (literal text only) and mean "/api/{**rest}".
// An empty Path matches every path. The request path is matched as ASP.NET
// sees it: percent-decoded, except that %2F stays encoded in its segment.
//
// Constraints follow ASP.NET Core's inline constraints and are all
// enforced; "{id:int:min(1)}" applies every one. Names are case-insensitive;
// an unknown name, a missing or extra argument list, or a bad argument is an
// error naming Match.Path. Numbers are read as .NET does with the invariant
// culture: surrounding white space (space, \t..\r) and a sign allowed.
//
//   - int, long: a 32- or 64-bit integer ("-5", " +7 ").
//   - bool: "true" or "false", any case.
//   - guid: 32 hex digits, optionally with dashes at 8-4-4-4-12 and in {}
//     or () (.NET's D, N, B and P formats; the X format is not accepted).
//   - alpha: ASCII letters only.
//   - required: a non-empty value.
//   - decimal: digits with ',' group separators, an optional '.' fraction,
//     a leading or trailing sign, no exponent, at most decimal.MaxValue.
//   - double, float: the same with an exponent ("1.5e-3"), no trailing
//     sign; "Infinity" and "NaN" (any case, optional sign); out-of-range
//     values become infinity in .NET, so they match.
//   - datetime: a subset of .NET's DateTime.TryParse: "2026-01-02", or
//     that followed by 'T' or ' ' and "hh:mm", "hh:mm:ss" or
//     "hh:mm:ss.fff" (any number of fraction digits), then optionally "Z"
//     or an offset "+hh:mm"/"+hh"; or the invariant "M/d/yyyy", optionally
//     with " H:mm[:ss]" (it contains '/', so only in a catch-all). The date
//     must exist. Month names and other .NET forms do not match.
//   - min(n), max(n), range(a,b): an integer (64-bit) within the bounds;
//     range needs a <= b.
//   - length(n), length(a,b), minlength(n), maxlength(n): the length in
//     UTF-16 code units, as .NET counts it (an emoji is 2); arguments
//     0..2147483647, a <= b.
//   - regex(expr): Go regexp (RE2) syntax, case-insensitive
//     (ASP.NET's RegexOptions.IgnoreCase | CultureInvariant), matched
//     anywhere in the value unless the pattern anchors itself with ^ and $.
//     The whole argument text is the pattern, commas included. Inside a
//     template, braces are written doubled ("^\\d{{3}}$" in JSON is the
//     pattern ^\d{3}$); a single '{' inside a parameter is an error.
//     Backslashes are passed through unchanged. A ')' ends the pattern only
//     where the parameter ends or a ':' or '=' follows, as in ASP.NET.
//     RE2 lacks .NET's backreferences and look-around (such patterns are
//     errors), its \d is ASCII only, and its $ does not match before a
//     final newline.
//   - file: the text after the last '/' has a '.' followed by something
//     other than dots ("a.txt"); nonfile is the opposite.
//
// The value checked is the parameter's text as matched (percent-decoded
// except %2F, see below); a catch-all's value keeps a trailing '/'. A
// parameter left out takes its default, which is checked; an optional one
// left out is not checked. An empty catch-all has no value: as in ASP.NET
// every constraint but nonfile rejects it, so "{**rest:required}" (or
// ":int", ":file") does not match an empty remainder. Constrained
// parameters rank as such in precedence (below) whatever the constraint,
// so a route whose constraint rejects the value simply does not match and
// the next route is tried.
//
// Hosts: "example.com" (case-insensitive), "*.example.com" (any sub-domain,
// not the apex), "*" (any), each optionally with ":port". A pattern with a
// port matches only that port; the request's port is the one in Host, or
// 80/443 by scheme. A pattern without a port matches any port.
//
// Precedence, as ASP.NET endpoint routing orders endpoints.
// Among the routes that match, the winner is the first by:
//
//  1. lower Order (default 0), before anything else, so an Order always
//     overrides specificity, as in ASP.NET and YARP;
//  2. then path precedence, as ASP.NET computes it: one digit per template
//     segment (1 literal, 2 constrained parameter or complex segment,
//     3 parameter, 4 constrained catch-all, 5 catch-all), compared segment
//     by segment, lower first, a missing segment counting as 0 (so "/a"
//     beats "/a/{**rest}", and "/a/b/{**rest}" beats "/a/{**rest}"). An
//     empty Path ranks as "/{**rest}";
//  3. then YARP's policy order: a route with Methods beats one without,
//     then one with Hosts beats one without, then more Headers win, then
//     more QueryParameters;
//  4. then RouteId (ordinal), so the choice is always deterministic where
//     ASP.NET would fail the request as ambiguous.
//
// NewTable sorts the routes by this rule once and indexes them by their
// first literal segment; Match walks one list in that order and returns the
// first route that matches, without allocating for plain paths.
package route
