package testutil

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// The Raft transport's handshake as store/transport speaks it, written out
// again from its constants so that a test checks the wire, not the code
// under test.
const (
	raftExporterLabel = "EXPORTER-tether-raft-auth-v1"
	raftAuthInfo      = "tether raft transport v1"
	raftALPNv2        = "tether-raft-2"
)

// raftHandshake dials addr with TLS 1.3 offering alpn (none: version 1)
// and returns the connection and the proof a role makes over the exporter
// and extra: HMAC-SHA256(HKDF(secret, raftAuthInfo), role | exporter |
// extra).
func raftHandshake(t testing.TB, addr string, secret []byte, alpn ...string) (*tls.Conn, func(role, extra string) []byte, bool) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, NextProtos: alpn})
	if err != nil {
		return nil, nil, false
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	cs := c.ConnectionState()
	ekm, err := cs.ExportKeyingMaterial(raftExporterLabel, nil, 32)
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	authKey, err := hkdf.Key(sha256.New, secret, nil, raftAuthInfo, 32)
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	mac := func(role, extra string) []byte {
		m := hmac.New(sha256.New, authKey)
		m.Write([]byte(role))
		m.Write(ekm)
		m.Write([]byte(extra))
		return m.Sum(nil)
	}
	return c, mac, true
}

// RaftV1Proves runs Raft handshake version 1 against addr as a peer of a
// release before the cluster id check does (TLS 1.3 with no ALPN, then
// the client's proof over the exporter) and reports whether the server
// answered with a valid proof of its own.
func RaftV1Proves(t testing.TB, addr string, secret []byte) bool {
	t.Helper()
	c, mac, ok := raftHandshake(t, addr, secret)
	if !ok {
		return false
	}
	defer c.Close()
	if _, err := c.Write(mac("client", "")); err != nil {
		return false
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(c, got); err != nil {
		return false
	}
	return hmac.Equal(got, mac("server", ""))
}

// RaftProves runs Raft handshake version 2 against addr as a peer holding
// secret would (TLS 1.3 with ALPN tether-raft-2, then the cluster id, here
// none, and the proof over the exporter and the id) and reports whether
// the server answered with a valid proof of its own.
func RaftProves(t testing.TB, addr string, secret []byte) bool {
	t.Helper()
	c, mac, ok := raftHandshake(t, addr, secret, raftALPNv2)
	if !ok {
		return false
	}
	defer c.Close()
	if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, 0), mac("client", "")...)); err != nil {
		return false
	}
	var n [2]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return false
	}
	b := make([]byte, int(binary.BigEndian.Uint16(n[:]))+sha256.Size)
	if _, err := io.ReadFull(c, b); err != nil {
		return false
	}
	cid := string(b[:len(b)-sha256.Size])
	return hmac.Equal(b[len(b)-sha256.Size:], mac("server", cid))
}
