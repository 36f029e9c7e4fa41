package dataprotection

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rsa"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// W3C XML Encryption identifiers that .NET's EncryptedXml.Encrypt(element,
// certificate) writes: an AES-256-CBC session key (any AES size is read),
// transported with RSA PKCS#1 v1.5 (OAEP with SHA-1 is read too).
const (
	xmlencElement    = "http://www.w3.org/2001/04/xmlenc#Element"
	xmlencAES128CBC  = "http://www.w3.org/2001/04/xmlenc#aes128-cbc"
	xmlencAES192CBC  = "http://www.w3.org/2001/04/xmlenc#aes192-cbc"
	xmlencAES256CBC  = "http://www.w3.org/2001/04/xmlenc#aes256-cbc"
	xmlencRSA15      = "http://www.w3.org/2001/04/xmlenc#rsa-1_5"
	xmlencRSAOAEPMGF = "http://www.w3.org/2001/04/xmlenc#rsa-oaep-mgf1p"
)

// errNeedCertificate marks a key encrypted to a certificate when none
// was configured.
var errNeedCertificate = errors.New("the key is encrypted with an X.509 certificate (EncryptedXmlDecryptor); configure DataProtection.Certificate with its certificate and private key")

// decryptSecrets returns e with every <encryptedSecret decryptorType="..">
// replaced by the element it decrypts to (XmlEncryptionExtensions.
// DecryptElement). e itself is not modified.
func decryptSecrets(e *element, certs []*Certificate) (*element, error) {
	if e.local == "encryptedSecret" {
		return decryptSecret(e, certs)
	}
	out := *e
	out.nodes = make([]node, len(e.nodes))
	for i, n := range e.nodes {
		if n.el != nil {
			el, err := decryptSecrets(n.el, certs)
			if err != nil {
				return nil, err
			}
			n.el = el
		}
		out.nodes[i] = n
	}
	return &out, nil
}

func decryptSecret(e *element, certs []*Certificate) (*element, error) {
	dt, err := e.requiredAttr("decryptorType")
	if err != nil {
		return nil, err
	}
	inner := e.elements()
	if len(inner) != 1 {
		return nil, fmt.Errorf("<encryptedSecret> must hold exactly one element, has %d", len(inner))
	}
	switch name := typeName(dt); name {
	case "EncryptedXmlDecryptor":
		if len(certs) == 0 {
			return nil, errNeedCertificate
		}
		pt, err := decryptEncryptedData(inner[0], certs)
		if err != nil {
			return nil, err
		}
		el, err := parseXML(pt)
		if err != nil {
			return nil, fmt.Errorf("decrypted secret is not XML: %w", err)
		}
		return el, nil
	case "NullXmlDecryptor":
		// <unencryptedKey><masterKey>..</masterKey></unencryptedKey>
		els := inner[0].elements()
		if inner[0].local != "unencryptedKey" || len(els) != 1 {
			return nil, errors.New("NullXmlDecryptor secret is not <unencryptedKey> with one element")
		}
		return els[0], nil
	case "DpapiXmlDecryptor", "DpapiNGXmlDecryptor":
		return nil, fmt.Errorf("the key is protected with Windows DPAPI (%s), which only Windows can decrypt; protect the key ring with a certificate (ProtectKeysWithCertificate) instead", name)
	default:
		return nil, fmt.Errorf("unsupported key decryptor %q", dt)
	}
}

// decryptEncryptedData decrypts an xmlenc <EncryptedData> of Type Element
// whose key is an <EncryptedKey> for one of certs. The cipher value is
// IV | AES-CBC ciphertext, padded ISO 10126 (only the last byte, the pad
// length, is meaningful).
func decryptEncryptedData(ed *element, certs []*Certificate) ([]byte, error) {
	if ed.local != "EncryptedData" {
		return nil, fmt.Errorf("expected <EncryptedData>, found <%s>", ed.local)
	}
	if t, ok := ed.attr("Type"); ok && t != xmlencElement {
		return nil, fmt.Errorf("unsupported EncryptedData Type %q", t)
	}
	alg, err := ed.childAttr("EncryptionMethod", "Algorithm")
	if err != nil {
		return nil, err
	}
	var keyLen int
	switch alg {
	case xmlencAES128CBC:
		keyLen = 16
	case xmlencAES192CBC:
		keyLen = 24
	case xmlencAES256CBC:
		keyLen = 32
	default:
		return nil, fmt.Errorf("unsupported EncryptedData algorithm %q", alg)
	}
	ki, err := ed.requiredChild("KeyInfo")
	if err != nil {
		return nil, err
	}
	ek, err := ki.requiredChild("EncryptedKey")
	if err != nil {
		return nil, err
	}
	sessionKey, err := decryptEncryptedKey(ek, certs)
	if err != nil {
		return nil, err
	}
	if len(sessionKey) != keyLen {
		return nil, errors.New("EncryptedKey does not fit the EncryptedData algorithm")
	}
	ct, err := cipherValue(ed)
	if err != nil {
		return nil, err
	}
	if len(ct) < 2*aes.BlockSize || len(ct)%aes.BlockSize != 0 {
		return nil, errors.New("EncryptedData cipher value has a bad length")
	}
	block, err := aes.NewCipher(sessionKey)
	if err != nil {
		return nil, err
	}
	pt := make([]byte, len(ct)-aes.BlockSize)
	cipher.NewCBCDecrypter(block, ct[:aes.BlockSize]).CryptBlocks(pt, ct[aes.BlockSize:])
	n := int(pt[len(pt)-1])
	if n < 1 || n > aes.BlockSize {
		return nil, errors.New("EncryptedData does not decrypt with this certificate's key (bad padding)")
	}
	return pt[:len(pt)-n], nil
}

// decryptEncryptedKey recovers the session key with the certificate the
// EncryptedKey names (its X509Certificate), or else with each in turn.
func decryptEncryptedKey(ek *element, certs []*Certificate) ([]byte, error) {
	alg, err := ek.childAttr("EncryptionMethod", "Algorithm")
	if err != nil {
		return nil, err
	}
	if alg != xmlencRSA15 && alg != xmlencRSAOAEPMGF {
		return nil, fmt.Errorf("unsupported EncryptedKey algorithm %q", alg)
	}
	wrapped, err := cipherValue(ek)
	if err != nil {
		return nil, err
	}
	candidates := certs
	var named []byte
	if ki := ek.child("KeyInfo"); ki != nil {
		if xd := ki.child("X509Data"); xd != nil {
			if xc := xd.child("X509Certificate"); xc != nil {
				if named, err = decodeB64(xc.text()); err != nil {
					return nil, fmt.Errorf("<X509Certificate>: %w", err)
				}
			}
		}
	}
	if named != nil {
		candidates = nil
		for _, c := range certs {
			if bytes.Equal(c.Leaf.Raw, named) {
				candidates = append(candidates, c)
			}
		}
		if len(candidates) == 0 {
			return nil, fmt.Errorf("the key is encrypted to the certificate with thumbprint %s, and no configured certificate matches (configured: %s)", thumbprint(named), thumbprints(certs))
		}
	}
	for _, c := range candidates {
		var key []byte
		if alg == xmlencRSA15 {
			//lint:ignore SA1019 key files ASP.NET wrapped with xmlenc rsa-1_5 open only this way; it reads the operator's own files at import, no oracle a client can query
			key, err = rsa.DecryptPKCS1v15(nil, c.Key, wrapped)
		} else {
			key, err = rsa.DecryptOAEP(sha1.New(), nil, c.Key, wrapped, nil)
		}
		if err == nil {
			return key, nil
		}
	}
	return nil, fmt.Errorf("no configured certificate (%s) decrypts the key's EncryptedKey", thumbprints(certs))
}

func cipherValue(e *element) ([]byte, error) {
	cd, err := e.requiredChild("CipherData")
	if err != nil {
		return nil, err
	}
	cv, err := cd.requiredChild("CipherValue")
	if err != nil {
		return nil, err
	}
	b, err := decodeB64(cv.text())
	if err != nil {
		return nil, fmt.Errorf("<CipherValue>: %w", err)
	}
	return b, nil
}

// decodeB64 is standard base64 with whitespace ignored.
func decodeB64(s string) ([]byte, error) {
	s = strings.Join(strings.Fields(s), "")
	return base64.StdEncoding.DecodeString(s)
}

// thumbprint is a certificate's SHA-1 thumbprint as Windows and .NET show
// it (upper-case hex), the name ASP.NET's logs use.
func thumbprint(der []byte) string {
	s := sha1.Sum(der)
	return strings.ToUpper(fmt.Sprintf("%x", s[:]))
}

func thumbprints(certs []*Certificate) string {
	var ts []string
	for _, c := range certs {
		ts = append(ts, thumbprint(c.Leaf.Raw))
	}
	if len(ts) == 0 {
		return "none"
	}
	return strings.Join(ts, ", ")
}
