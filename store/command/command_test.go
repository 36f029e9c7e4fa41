package command

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
)

// t0 is the tests' epoch (keys are made relative to it).
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func testKEK(t testing.TB) []byte {
	t.Helper()
	kek, err := keyring.DeriveKEK([]byte("0123456789abcdef-test-cluster-secret"), keyring.InfoRaft)
	if err != nil {
		t.Fatal(err)
	}
	return kek
}

func testKey(id string, activates time.Duration) keyring.Key {
	m := make([]byte, keyring.KeySize)
	copy(m, id)
	return keyring.Key{ID: id, Created: t0, Activates: t0.Add(activates), Expires: t0.Add(activates + 90*24*time.Hour), Material: m}
}
func TestCommandsRoundTrip(t *testing.T) {
	kek := testKEK(t)
	k := testKey("k1", 0)
	cmds := []Command{
		InstallKey{ReqID: "r", Key: k}, ActivateKey{ReqID: "r", ID: "k1", At: t0}, RevokeKey{ReqID: "r", ID: "k1", Replacement: nil}, RevokeKey{ReqID: "r", ID: "k1", Replacement: &k},
		PruneKeys{ReqID: "r", Now: t0}, SetDrain{ReqID: "r", Cluster: "c", Destination: "d", Deadline: t0}, ClearDrain{ReqID: "r", Cluster: "c", Destination: "d"}, SetClusterID{ReqID: "r", ID: "c1"}, SetClock{ReqID: "r", At: t0},
		ClusterSecret{ReqID: "r", Op: SecretInstall, ID: "0123456789abcdef", Wrapped: []byte("wrapped"), Under: "fedcba9876543210"},
		ClusterSecret{ReqID: "r", Op: SecretUse, ID: "0123456789abcdef", Wrapped: nil, Under: ""}, ClusterSecret{ReqID: "r", Op: SecretRemove, ID: "0123456789abcdef", Wrapped: nil, Under: ""},
	}
	for _, c := range cmds {
		b, err := Encode(kek, c)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		if bytes.Contains(b, k.Material) {
			t.Errorf("%T: material in the clear in the log entry", c)
		}
		got, err := Decode(kek, b)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", c) {
			t.Errorf("round trip: %#v, want %#v", got, c)
		}
	}
	bad := []struct {
		desc string
		cmd  Command
	}{
		{"drain without a cluster", SetDrain{ReqID: "r", Cluster: "", Destination: "d", Deadline: t0}},
		{"drain without a deadline", SetDrain{ReqID: "r", Cluster: "c", Destination: "d", Deadline: time.Time{}}},
		{"empty cluster id", SetClusterID{ReqID: "r", ID: ""}},
		{"clock without a time", SetClock{ReqID: "r", At: time.Time{}}},
		{"oversized request id", SetClusterID{ReqID: strings.Repeat("x", maxReqIDLen+1), ID: "c"}},
		{"invalid key", InstallKey{ReqID: "r", Key: keyring.Key{ID: "bad id"}}},
		{"secret id not hex", ClusterSecret{ReqID: "r", Op: SecretUse, ID: "not-a-secret-id!", Wrapped: nil, Under: ""}},
		{"install without the wrapped secret", ClusterSecret{ReqID: "r", Op: SecretInstall, ID: "0123456789abcdef", Wrapped: nil, Under: "fedcba9876543210"}},
		{"unknown secret operation", ClusterSecret{ReqID: "r", Op: "rotate", ID: "0123456789abcdef", Wrapped: nil, Under: ""}},
	}
	for _, c := range bad {
		if _, err := Encode(kek, c.cmd); err == nil {
			t.Errorf("%s: encoded", c.desc)
		}
	}
}

func FuzzDecodeCommand(f *testing.F) {
	kek := testKEK(f)
	k := testKey("k1", 0)
	for _, c := range []Command{InstallKey{ReqID: "r", Key: k}, RevokeKey{ReqID: "r", ID: "k1", Replacement: &k}, SetDrain{ReqID: "r", Cluster: "c", Destination: "d", Deadline: t0}, SetClusterID{ReqID: "r", ID: "c"}, SetClock{ReqID: "r", At: t0},
		ClusterSecret{ReqID: "r", Op: SecretInstall, ID: "0123456789abcdef", Wrapped: []byte("wrapped"), Under: "fedcba9876543210"}} {
		b, _ := Encode(kek, c)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{TypePruneKeys, 1, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, err := Decode(kek, data)
		if err != nil {
			return
		}
		// What decodes, encodes and decodes to the same
		b, err := Encode(kek, cmd)
		if err != nil {
			t.Fatalf("decoded %#v does not encode: %v", cmd, err)
		}
		again, err := Decode(kek, b)
		if err != nil || fmt.Sprintf("%#v", again) != fmt.Sprintf("%#v", cmd) {
			t.Fatalf("re-decode: %#v, %v; want %#v", again, err, cmd)
		}
	})
}

func FuzzRequestEnvelope(f *testing.F) {
	f.Add([]byte(`{"req":"r","bind":"0123"}`), "b")
	f.Add([]byte(`{}`), "")
	f.Add([]byte(`{"bind":1}`), "x")
	f.Fuzz(func(t *testing.T, body []byte, bind string) {
		e, err := ReadEnvelope(body)
		if err == nil && (e.ReqID == "" || len(e.ReqID) > maxReqIDLen || checkBind(e.Bind) != nil) {
			t.Fatalf("accepted %+v", e)
		}
		entry, err := WithBinding(append([]byte{TypeSetClusterID, 1}, body...), bind)
		if err != nil || bind == "" {
			return
		}
		if got, err := ReadEnvelope(entry[2:]); err == nil && got.Bind != bind {
			t.Fatalf("binding %q read back as %q from %q", bind, got.Bind, entry[2:])
		}
	})
}
