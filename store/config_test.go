package store

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

func TestAdvertiseAddressRules(t *testing.T) {
	bound := &net.TCPAddr{IP: net.IPv4zero, Port: 7000}
	cases := []struct {
		desc, bind, advertise, want, wantErr string
	}{
		{"specific bind IP is advertised as is", "127.0.0.1:0", "", "127.0.0.1:7000", ""},
		{"unspecified bind without --advertise fails and says what to set", ":7000", "", "", "--advertise"},
		{"0.0.0.0 bind without --advertise fails", "0.0.0.0:7000", "", "", "--advertise"},
		{"host without port gets the bound port", ":7000", "node1.example", "node1.example:7000", ""},
		{"host name with port is kept for re-resolution", ":7000", "node1.example:7100", "node1.example:7100", ""},
		{"IPv6 without port", "[::]:7000", "[fd00::1]", "[fd00::1]:7000", ""},
		{"IPv6 with port", "[::]:7000", "[fd00::1]:7001", "[fd00::1]:7001", ""},
		{"unspecified advertise is refused", ":7000", "0.0.0.0:7000", "", "unspecified"},
		{"bad port is refused", ":7000", "node1:http", "", "bad port"},
	}
	for _, c := range cases {
		got, err := advertiseAddr(c.bind, c.advertise, bound)
		switch {
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: err %v, want one mentioning %q", c.desc, err, c.wantErr)
		case c.wantErr == "" && (err != nil || got != c.want):
			t.Errorf("%s: %q, %v; want %q", c.desc, got, err, c.want)
		}
	}
}

func TestOpenRefusesBadConfigNamingTheField(t *testing.T) {
	good := Config{NodeID: "n1", Dir: t.TempDir(), BindAddr: "127.0.0.1:0", Secret: testSecret, Logger: testLogger()}
	cases := []struct {
		desc string
		edit func(*Config)
		want string
	}{
		{"node id is required", func(c *Config) { c.NodeID = "" }, "NodeID"},
		{"dir is required", func(c *Config) { c.Dir = "" }, "Dir"},
		{"bind address is required", func(c *Config) { c.BindAddr = "" }, "BindAddr"},
		{"secret is required", func(c *Config) { c.Secret = nil }, "Secret"},
		{"short secret is refused", func(c *Config) { c.Secret = []byte("short") }, "Secret is 5 bytes"},
		{"TLS needs all three files", func(c *Config) { c.TLS = &TLSFiles{CertFile: "x"} }, "TLS needs"},
		{"negative timing is refused", func(c *Config) { c.Timing = Timing{HeartbeatTimeout: -1} }, "Timing"},
		{"unspecified bind needs --advertise", func(c *Config) { c.BindAddr = ":0" }, "--advertise"},
	}
	for _, c := range cases {
		cfg := good
		c.edit(&cfg)
		s, err := Open(cfg)
		if err == nil {
			s.Shutdown()
			t.Errorf("%s: Open succeeded", c.desc)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to mention %q", c.desc, err, c.want)
		}
	}
}

func TestSingleNodeBootstrapIsIdempotentAndAdvertisesHostName(t *testing.T) {
	cfg := Config{NodeID: "n1", Dir: t.TempDir(), BindAddr: "127.0.0.1:0", Advertise: "localhost",
		Secret: testSecret, Timing: FastTiming(), Logger: testLogger()}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if !strings.HasPrefix(s.Addr(), "localhost:") || s.HadState() {
		t.Fatalf("Addr %q, HadState %t", s.Addr(), s.HadState())
	}
	for i := 0; i < 2; i++ {
		if err := s.Bootstrap(nil); err != nil {
			t.Fatalf("Bootstrap #%d: %v", i+1, err)
		}
	}
	testutil.Eventually(t, 5*time.Second, "the single node to lead", s.IsLeader)
	if _, err := s.Apply(SetClusterID{ID: "c1"}); err != nil {
		t.Fatal(err)
	}
	if s.ClusterID() != "c1" || s.State() != "Leader" {
		t.Errorf("cluster id %q, state %s", s.ClusterID(), s.State())
	}
	// A second store on the same directory fails fast instead of hanging.
	cfg.BindAddr = "127.0.0.1:0"
	if s2, err := Open(cfg); err == nil {
		s2.Shutdown()
		t.Error("a second Open of the same directory succeeded")
	}
}

func TestOpenWithAnotherSecretSaysSo(t *testing.T) {
	cfg := Config{NodeID: "n1", Dir: t.TempDir(), BindAddr: "127.0.0.1:0", Secret: testSecret, Timing: FastTiming(), Logger: testLogger()}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Bootstrap(nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the single node to lead", s.IsLeader)
	idx, err := s.Apply(InstallKey{Key: testKey("k1", 0)})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the install to be in a snapshot", func() bool { return s.DurableIndex() >= idx })
	s.Shutdown()

	cfg.Secret = []byte("another-secret-of-enough-length")
	s2, err := Open(cfg)
	if err == nil {
		s2.Shutdown()
		t.Fatal("Open with another cluster secret succeeded")
	}
	if !strings.Contains(err.Error(), "cluster secret") {
		t.Errorf("error does not name the cause: %v", err)
	}
	cfg.Secret = testSecret
	s3, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open with the right secret after a refused one: %v", err)
	}
	s3.Shutdown()
}
