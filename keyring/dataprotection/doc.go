// Package dataprotection reads ASP.NET Core Data Protection key rings and
// implements IDataProtector's Protect and Unprotect byte for byte as ASP.NET
// does, so that tether can open the session affinity values a YARP fleet
// issued and issue values YARP opens (see docs/YARP.md, "Moving live
// sessions").
//
// Key ring. [Open] reads a directory of XML key files as ASP.NET's
// FileSystemXmlRepository writes them (PersistKeysToFileSystem): every *.xml
// file is a <key id=".." version="1"> (creation, activation and expiration
// dates, and a <descriptor deserializerType=".."> holding the algorithms
// and the master key) or a <revocation> (one key, or every key created
// before a date). Descriptors of the four ASP.NET deserializers are read
// (AuthenticatedEncryptor, the default; ManagedAuthenticatedEncryptor; CNG
// CBC and GCM): AES-128/192/256 in CBC with HMACSHA256/512, or in GCM. A
// master key may be in clear or encrypted to an X.509 certificate
// (ProtectKeysWithCertificate: xmlenc EncryptedData, AES-CBC with an RSA
// PKCS#1 v1.5 or OAEP key transport), decrypted with a [Certificate] given
// as PEM files or a PKCS#12 file ([LoadCertificate]). DPAPI-protected keys
// (Windows only) are reported as unusable. The ring never writes: it re-reads
// the directory when a payload names an unknown key (at most once per
// Options.MissRefresh) and in the background every Options.Refresh while in
// use, so keys the fleet adds or revokes are picked up.
//
// Payload ([Protector.Protect], KeyRingBasedDataProtector): { 0x09F0C9F0
// (magic header, version 0) | key id (Guid bytes) | encryptor output }. The
// additional authenticated data is { magic | key id | purpose count (uint32
// BE) | purposes (7-bit length-prefixed UTF-8) }; the application
// discriminator, when the app has one, is the first purpose. CBC+HMAC
// (ManagedAuthenticatedEncryptor, CbcAuthenticatedEncryptor) outputs
// { key modifier (16) | IV (16) | AES-CBC PKCS#7 ciphertext | HMAC(IV |
// ciphertext) }, its encryption and MAC subkeys derived per payload by
// SP800-108 CTR with HMAC-SHA512 from the master key, the AAD as label and
// the context header (algorithm sizes and the encryption and MAC of the
// empty string under keys from an empty KDK) followed by the key modifier as
// context. GCM (AesGcmAuthenticatedEncryptor) outputs { key modifier (16) |
// nonce (12) | ciphertext | tag (16) } with the same derivation.
//
// Keys: the default key (Protect) is the usable, unrevoked, unexpired key
// with the latest activation date not after now. Unprotect accepts any known
// unrevoked key, expired or not, as ASP.NET does; revoked keys are refused.
// Each Protector remembers up to 4096 payloads that opened (an affinity
// value repeats on every request of its session), rechecking the key
// against the current ring on every hit.
//
// Untrusted input: key files (written by the fleet, but parsed with XML
// limits: 1 MiB, depth 32, 10000 elements, no DTDs) and payloads (from
// clients) are fuzzed. Known-answer tests use ASP.NET's own vectors and a
// key ring and payload ASP.NET produced (testdata/README.md).
package dataprotection
