// Package affinity is tether's session affinity engine (proxy/DESIGN.md,
// "Session affinity"): for one cluster, or one route's override, it decides
// which destinations a request may go to, adds the session key to the
// response, and for the envelope policies restores the backend's own session
// value on the way in. The data path (package proxy) calls New per cluster
// snapshot, then Resolve, RewriteRequest and Affinitize per request, and
// counts Decision.Outcome into tether_affinity_requests_total{outcome}. A nil
// *Provider is affinity disabled: New returns nil for Enabled=false, which is
// how a per-route {"Enabled": false} override switches it off.
//
// Policies and wire formats (YARP-compatible, so a fleet can move from YARP
// without breaking live sessions). HashCookie (default): XxHash64, seed 0,
// of the UTF-16LE bytes of the upper-cased key input, as 16 lowercase hex
// digits of the big-endian digest. ArrCookie (IIS ARR): SHA-256 of the
// UTF-16LE bytes of the lower-cased key input, 64 uppercase hex digits.
// Incoming hash values match case-insensitively (both policies). Cookie and
// CustomHeader: the key input sealed by the cluster Keyring (AES-256-GCM with
// the key id, base64url without padding, encoded by the keyring) with the
// purpose "tether/affinity/v1" followed by the length-prefixed canonical
// policy name, cluster id and key name, so a value cannot be replayed into
// another cluster, policy or key name. Upper- and lower-casing follow .NET's
// invariant mapping: Go's simple Unicode case mapping, except that dotless
// 'ı' (U+0131) stays as it is when upper-cased and dotted 'İ' (U+0130) when
// lower-cased, as .NET does. A sealed value carries a session id chosen
// when the session starts (plaintext: 0x00 'S', 8-byte id, key input;
// session.go), so every new session seals once; per node and key at most
// 2^26 such seals, after which values are reused per group while the active
// key stays the same (the GCM nonce budget is explained in session.go).
// Values sealed before session ids (the key input alone) still open.
//
// Resolution. (1) No key (no cookie or header of that name, or an empty
// value): every destination that AcceptsNew is a candidate, Attach is set,
// Outcome NoSession. (2) A valid key: every destination of its group that
// AcceptsExisting is a candidate (the load balancer picks among them),
// Attach is not set, Outcome Routed: only the first response of a session
// carries the key. (3) An invalid key (undecodable, fails to open or
// verify, unknown, or longer than MaxKeyLength), or a group with no
// destination left: the failure policy runs. Redistribute: Outcome
// FailedOpen, Attach set, and the candidates are chosen deterministically by
// rendezvous hashing: among the key inputs that have a destination that
// AcceptsNew, the one with the highest XxHash64(BE64(seed) + key input)
// wins (ties: the smaller input), and its destinations that AcceptsNew are
// the candidates; every node therefore sends the parallel requests of one
// broken session to the same replacement, and the sessions of one dead
// destination spread over the others because the seed is per session: the
// session id of a sealed value that carries one; for HashCookie and
// ArrCookie, XxHash64(raw value + 0x00 + client address) (ResolveClient;
// Resolve uses the host of RemoteAddr); otherwise (an old sealed value, an
// invalid one) XxHash64(raw value). This path is O(groups); it runs once
// per broken session. Replacement gives the data path's connect-failure
// retry the same answer before the destination is known to be gone (the
// failed destination left out), with Attach set. Return503Error: Outcome
// FailedClosed, no candidates, Status = FailureStatusCode (default 503).
// Empty candidates with Status 0 mean no destination can serve: 503.
//
// Cookie settings. The Set-Cookie header follows ASP.NET's spelling and
// order (name=value; expires; max-age; domain; path; secure; samesite;
// httponly). Domain is sent when set; Path defaults to "/"; Expiration sets
// expires = now + Expiration (Options.Now, default time.Now); MaxAge sets
// max-age in whole seconds; HttpOnly defaults to true; IsEssential is
// accepted and has no effect (no consent is enforced); SameSite Unspecified
// omits the attribute, None/Lax/Strict send it; SecurePolicy SameAsRequest
// sends secure when Affinitize's secure argument is true, Always always,
// None never. Hash values are plain hex and sealed values base64url, both
// valid cookie octets. CustomHeader sets a response header of its name
// instead. A keyring failure while sealing attaches nothing: the next
// request simply starts a session again. Configuration errors are
// config.Errors with paths relative to the block ("SessionAffinity.Policy",
// "SessionAffinity.Cookie.Domain"), all reported at once.
//
// Groups and lookup. A destination's key input is Destination.AffinityKey
// (Metadata["AffinityKey"] when set, else its id); destinations sharing it
// form a group with one key. New precomputes a map from the lookup form of a
// value to the group (HashCookie: lowercase hex; ArrCookie: uppercase hex;
// sealed policies: the opened key input), so Resolve never scans the
// destinations to match a key. The request value is found by scanning
// r.Header["Cookie"] in place (net/http's Request.Cookie allocates); hex is
// case-folded into a stack array; candidates are appended to the caller's
// buf. HashCookie and ArrCookie resolution allocates nothing. Resolve
// expects the cluster New was given; another cluster gets a table built on
// the spot (correct, not free).
//
// Duplicates and hostile input. With several cookies of the key name the
// first wins (as net/http's Request.Cookie and ASP.NET's request cookies);
// with several header values the first wins. A value may be quoted as RFC
// 6265 allows. Values longer than MaxKeyLength (4 KiB) are failures before
// any decoding or decryption; malformed, truncated, tampered or foreign
// values are failures handled by the failure policy, never a panic (fuzzed
// per decoder).
//
// Draining needs nothing of its own: a draining destination does not
// AcceptsNew, so it gets no new sessions and is never a redistribution
// target, but it AcceptsExisting until its drain deadline, so its sessions
// stay until then and redistribute afterwards.
//
// YARP's own values (Options.Yarp, yarp.go; config section DataProtection).
// With a YARP fleet's ASP.NET Data Protection key ring, Cookie and
// CustomHeader also open the values YARP issued: a value starting with Data
// Protection's magic header ("CfDJ8") is percent-decoded (cookies only, as
// ASP.NET's Request.Cookies does), base64-decoded (standard alphabet, '='
// optional) and unprotected with the purposes (application discriminator,
// YARP's policy type name); any other value, or one that fails, goes to the
// cluster keyring as before. With Yarp.Issue the attached value is YARP's
// format (percent-escaped in a cookie, as Response.Cookies writes it),
// reused while the ring's default key stays the same, and tether's own when
// the ring has no default key. Hash and envelope policies ignore Yarp.
// OpenYarp opens the section's key ring; a YarpRing keeps it across
// reloads while the section and its certificate files are unchanged.
//
// Envelope policies (Envoy's envelope session state). EnvelopeCookie and
// EnvelopeHeader name the backend's own session cookie or header in
// AffinityKeyName (e.g. JSESSIONID). On the way out, whenever the backend's
// response sets that cookie (each Set-Cookie line of that name) or header
// to a non-empty value, the value is replaced by "<sealed key input>.<value>"
// and every other byte of the line (all attributes) is kept; a quoted
// cookie value stays quoted around the whole envelope. The sealed part is
// base64url and cannot contain '.', so the first '.' separates it, and the
// backend value follows verbatim, dots included. Nothing is ever added when
// the backend does not set its value, and Attach plays no part. On the way
// in, Resolve opens the sealed part to find the group (rules 1 to 3 as
// above), and RewriteRequest puts back exactly the backend's value in the
// outgoing request's Cookie header (other cookies untouched, same order and
// spacing) or header. Rule: tether strips only what it authenticates as its
// own envelope, and then always (also after a redistribution, so a backend
// with a shared session store can pick the session up); any other value (a
// raw backend value from before envelopes were enabled, a tampered or
// foreign envelope) is an affinity failure, and under Redistribute it is
// forwarded exactly as the client sent it. An envelope tether sealed but can
// no longer open (its key revoked, expired or unknown) reaches the backend as
// nothing (envelope.go). So the backend only ever sees values it issued
// itself, or whatever the client made up, never a tether-mangled one.
//
// Cookies browsers accept (response.go): an affinity cookie named
// "__Secure-..." always has Secure, one named "__Host-..." also Path=/ and no
// Domain; SameSite=None with SecurePolicy None gets Secure on HTTPS requests.
// A Return503Error refusal has its own body, RefusalBody.
package affinity
