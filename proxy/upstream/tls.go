package upstream

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
)

// TLSFiles name a cluster's backend TLS trust settings: a CA bundle that
// replaces the system's roots, and a client certificate for mutual TLS.
// Empty fields leave Go's defaults.
type TLSFiles struct {
	CAPath   string
	CertPath string
	KeyPath  string
	// Insecure skips verification (DangerousAcceptAnyServerCertificate).
	Insecure bool
}

// TLSFileError says which of the files could not be used.
type TLSFileError struct {
	// Field is "CA", "Cert" or "Key".
	Field string
	Err   error
}

func (e *TLSFileError) Error() string { return e.Err.Error() }
func (e *TLSFileError) Unwrap() error { return e.Err }

// BackendTLS is a cluster's compiled backend TLS settings.
type BackendTLS struct {
	// Config is the base client configuration: roots, client certificate,
	// minimum version, verification. Transports take a clone.
	Config *tls.Config
	// Fingerprint changes when a setting or a file's content does, so a
	// reload after the files were rotated builds a new transport.
	Fingerprint string
}

// LoadTLS reads the files of f.
func LoadTLS(f TLSFiles) (*BackendTLS, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: f.Insecure, //nolint:gosec // operator's explicit choice
	}
	h := sha256.New()
	fmt.Fprintf(h, "insecure=%v\n", f.Insecure)
	if f.CAPath != "" {
		pem, err := os.ReadFile(f.CAPath)
		if err != nil {
			return nil, &TLSFileError{"CA", err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &TLSFileError{"CA", fmt.Errorf("%s holds no PEM certificate", f.CAPath)}
		}
		cfg.RootCAs = pool
		fmt.Fprintf(h, "ca=%d\n", len(pem))
		h.Write(pem)
	}
	switch {
	case f.CertPath != "" && f.KeyPath != "":
		certPEM, err := os.ReadFile(f.CertPath)
		if err != nil {
			return nil, &TLSFileError{"Cert", err}
		}
		keyPEM, err := os.ReadFile(f.KeyPath)
		if err != nil {
			return nil, &TLSFileError{"Key", err}
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, &TLSFileError{"Cert", fmt.Errorf("%s and %s are not a PEM certificate and its key: %v", f.CertPath, f.KeyPath, err)}
		}
		cfg.Certificates = []tls.Certificate{cert}
		fmt.Fprintf(h, "cert=%d\n", len(certPEM))
		h.Write(certPEM)
		h.Write(keyPEM)
	case f.CertPath != "":
		return nil, &TLSFileError{"Key", errors.New("required with a certificate")}
	case f.KeyPath != "":
		return nil, &TLSFileError{"Cert", errors.New("required with a key")}
	}
	return &BackendTLS{Config: cfg, Fingerprint: hex.EncodeToString(h.Sum(nil))}, nil
}

// DialFunc dials a TCP connection.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// DialTLS returns a DialTLSContext for tr that does the TLS handshake
// itself, so that each connection's SNI, and the name its certificate is
// checked against, follow the destination's Host setting rather than the
// address: serverName returns the name for a dial address ("host:port"),
// or "" for the address's own host, as Go's transport would use. The
// handshake uses a clone of tr.TLSClientConfig taken at dial time, so the
// protocols the transport negotiates (h2 by ALPN) still apply, and is
// bounded by tr.TLSHandshakeTimeout.
func DialTLS(tr *http.Transport, dial DialFunc, serverName func(addr string) string) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := tr.TLSClientConfig.Clone()
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if cfg.ServerName == "" {
			cfg.ServerName = serverName(addr)
		}
		if cfg.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = host
			}
		}
		if d := tr.TLSHandshakeTimeout; d > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, err
		}
		return tc, nil
	}
}

// TLSAddr is the dial address Go's transport uses for an https URL host:
// the port defaults to 443.
func TLSAddr(hostport string) string {
	if _, _, err := net.SplitHostPort(hostport); err == nil {
		return hostport
	}
	h := hostport
	if len(h) > 1 && h[0] == '[' && h[len(h)-1] == ']' {
		h = h[1 : len(h)-1]
	}
	return net.JoinHostPort(h, "443")
}

// ServerNameOf is the SNI for a destination Host setting: the host
// without a port, "" when host is empty.
func ServerNameOf(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	return host
}
