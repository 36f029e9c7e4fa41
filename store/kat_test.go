package store

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/store/command"
	"github.com/tether-proxy/tether/store/transport"
)

// Known-answer vectors made by testdata/kat.py (python3 cryptography).
var katSecret = []byte("tether-kat-cluster-secret-0001")

func katVectors(t *testing.T) map[string][]byte {
	t.Helper()
	f, err := os.Open("testdata/kat.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string][]byte{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, hx, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		b, err := hex.DecodeString(hx)
		if err != nil {
			t.Fatalf("kat.txt %s: %v", name, err)
		}
		m[name] = b
	}
	return m
}

// hkdfSHA256 is RFC 5869 written out (empty salt = HashLen zeros, L = 32).
func hkdfSHA256(secret []byte, info string) []byte {
	ext := hmac.New(sha256.New, make([]byte, sha256.Size))
	ext.Write(secret)
	prk := ext.Sum(nil)
	exp := hmac.New(sha256.New, prk)
	exp.Write([]byte(info))
	exp.Write([]byte{1})
	return exp.Sum(nil)
}

func TestKEKDerivationKnownAnswers(t *testing.T) {
	v := katVectors(t)
	cases := []struct{ desc, info, vector string }{
		{"raft log and snapshot KEK", keyring.InfoRaft, "kek"},
		{"transport authentication key", transport.InfoAuth, "auth"},
	}
	for _, c := range cases {
		got, err := keyring.DeriveKEK(katSecret, c.info)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, v[c.vector]) || !bytes.Equal(got, hkdfSHA256(katSecret, c.info)) {
			t.Errorf("%s: %x, want %x (python) = %x (RFC 5869 by hand)", c.desc, got, v[c.vector], hkdfSHA256(katSecret, c.info))
		}
	}
	if keyring.InfoRaft == transport.InfoAuth || keyring.InfoRaft == keyring.InfoKeyringFile {
		t.Error("KEK info strings are not distinct")
	}
}

func katKey() keyring.Key {
	m := make([]byte, 32)
	for i := range m {
		m[i] = byte(i)
	}
	return keyring.Key{ID: "kat1", Created: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		Activates: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), Expires: time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC), Material: m}
}

func sameKey(a, b keyring.Key) bool {
	return a.ID == b.ID && a.Created.Equal(b.Created) && a.Activates.Equal(b.Activates) && a.Expires.Equal(b.Expires) &&
		a.Revoked == b.Revoked && bytes.Equal(a.Material, b.Material)
}

func TestWrappedFormatKnownAnswers(t *testing.T) {
	v := katVectors(t)
	kek, _ := keyring.DeriveKEK(katSecret, keyring.InfoRaft)
	want := katKey()

	keys, err := keyring.UnwrapKeys(kek, v["wrapped"])
	if err != nil || len(keys) != 1 || !sameKey(keys[0], want) {
		t.Fatalf("python-wrapped key set: %v, %v", keys, err)
	}

	cmd, err := command.Decode(kek, v["install"])
	if err != nil {
		t.Fatalf("python-encoded InstallKey: %v", err)
	}
	ik, ok := cmd.(InstallKey)
	if !ok || ik.ReqID != "kat-req-1" || !sameKey(ik.Key, want) {
		t.Fatalf("python-encoded InstallKey decoded as %#v", cmd)
	}

	snap, err := decodeSnapshot(kek, v["snapshot"])
	if err != nil {
		t.Fatalf("python-encoded snapshot: %v", err)
	}
	b := snap.body
	if b.ClusterID != "kat-cluster" || len(snap.keys) != 1 || !sameKey(snap.keys[0], want) ||
		len(b.Drains) != 1 || b.Drains[0].Destination != "d1" || len(b.Requests) != 1 || b.Requests[0].ID != "kat-req-1" {
		t.Fatalf("python-encoded snapshot decoded as %+v, keys %v", b, snap.keys)
	}

	// The other secret's KEK opens none of them.
	other, _ := keyring.DeriveKEK([]byte("another-secret-of-enough-length"), keyring.InfoRaft)
	if _, err := command.Decode(other, v["install"]); err == nil {
		t.Error("InstallKey decoded under a different secret")
	}
	if _, err := decodeSnapshot(other, v["snapshot"]); err == nil {
		t.Error("snapshot decoded under a different secret")
	}
}

// The snapshot format's second version names the command set applied into
// the state; a binary refuses a snapshot it cannot fully understand (a
// command it does not apply, a field it does not know, a newer format) as
// it refuses a log entry of a newer command: stopped, state untouched.
func TestSnapshotFormatKnownAnswers(t *testing.T) {
	v := katVectors(t)
	kek, _ := keyring.DeriveKEK(katSecret, keyring.InfoRaft)
	snap, err := decodeSnapshot(kek, v["snapshot2"])
	if err != nil {
		t.Fatalf("python-encoded version 2 snapshot: %v", err)
	}
	if snap.body.Commands != "1111111111" || snap.body.ClusterID != "kat-cluster" || len(snap.keys) != 1 || !sameKey(snap.keys[0], katKey()) {
		t.Fatalf("version 2 snapshot decoded as %+v", snap.body)
	}
	legacy, err := decodeSnapshot(kek, v["snapshot"])
	if err != nil || legacy.body.Commands != legacySnapshotCommands {
		t.Fatalf("version 1 snapshot: commands %q, %v; want %q", legacy.body.Commands, err, legacySnapshotCommands)
	}

	cases := []struct {
		vector string
		want   string // in the error and the ERROR line
	}{
		{"snapshot2_newer_command", "command type 12 v1"},
		{"snapshot2_unknown_field", "unknown field"},
		{"snapshot3", "format version 3"},
	}
	for _, c := range cases {
		t.Run(c.vector, func(t *testing.T) {
			sec, err := keyring.NewSecrets(katSecret)
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			f := newFSM(newRing(), sec, slog.New(slog.NewTextHandler(&logs, nil)))
			f.snapIndex = func() uint64 { return 40 }
			feed(t, f, kek, SetClusterID{ReqID: "r1", ID: "mine"})
			stopped := 0
			f.onStop = func() { stopped++ }
			err = f.Restore(io.NopCloser(bytes.NewReader(v[c.vector])))
			if !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Restore: %v; want ErrStopped naming %q", err, c.want)
			}
			if idx, need := f.stopped(); idx != 40 || !strings.Contains(need, "upgrade tether") || stopped != 1 {
				t.Errorf("stopped at %d (%q), onStop called %d times; want 40, asking for an upgrade, once", idx, need, stopped)
			}
			if f.ClusterID() != "mine" || f.index.Load() != 1 {
				t.Errorf("the refused snapshot changed the state: cluster %q, applied %d", f.ClusterID(), f.index.Load())
			}
			// Offered again (raft retries): refused, one ERROR line.
			f.Restore(io.NopCloser(bytes.NewReader(v[c.vector])))
			if n := strings.Count(logs.String(), "level=ERROR"); n != 1 || !strings.Contains(logs.String(), c.want) {
				t.Errorf("want one ERROR line naming %q, got %d:\n%s", c.want, n, logs.String())
			}
			// The understood one, at the same index, clears the stop.
			if err := f.Restore(io.NopCloser(bytes.NewReader(v["snapshot2"]))); err != nil {
				t.Fatal(err)
			}
			if idx, _ := f.stopped(); idx != 0 || f.ClusterID() != "kat-cluster" {
				t.Errorf("after a snapshot it understands: stopped %d, cluster %q", idx, f.ClusterID())
			}
		})
	}
}

// TestConfigFormatKnownAnswers: a SetConfig entry and a snapshot holding
// the config history, encoded by testdata/kat.py.
func TestConfigFormatKnownAnswers(t *testing.T) {
	v := katVectors(t)
	kek, _ := keyring.DeriveKEK(katSecret, keyring.InfoRaft)
	at := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	want := SetConfig{ReqID: "kat-cfg", IfVersion: 1, Content: []byte(`{"Routes":{"r1":{"ClusterId":"c1"}}}`), Summary: "1 routes, 0 clusters", At: at}
	got, err := command.Encode(kek, want)
	if err != nil || !bytes.Equal(got, v["setconfig"]) {
		t.Fatalf("SetConfig encodes as %x (%v), want %x", got, err, v["setconfig"])
	}
	cmd, err := command.Decode(kek, v["setconfig"])
	if c, ok := cmd.(SetConfig); err != nil || !ok || c.ReqID != want.ReqID || c.IfVersion != 1 || !bytes.Equal(c.Content, want.Content) || !c.At.Equal(at) || c.Summary != want.Summary {
		t.Fatalf("SetConfig decodes as %+v, %v", cmd, err)
	}
	snap, err := decodeSnapshot(kek, v["snapshot2_config"])
	if err != nil {
		t.Fatal(err)
	}
	sec, err := keyring.NewSecrets(katSecret)
	if err != nil {
		t.Fatal(err)
	}
	f := newFSM(newRing(), sec, testLogger())
	if err := f.Restore(io.NopCloser(bytes.NewReader(v["snapshot2_config"]))); err != nil {
		t.Fatal(err)
	}
	s := &Store{fsm: f}
	h := s.ConfigHistory()
	if len(snap.body.Config) != 2 || len(h) != 2 || h[0].Version != 2 || h[0].Summary != "rollback to version 1" || string(h[0].Content) != `{"Routes":{}}` || h[0].Index != 6 || h[1].Version != 1 {
		t.Fatalf("config history %+v", h)
	}
}
