package store

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
)

// TestRestoreBackupRefusesWhatItCannotOpen: a backup is checked before it
// reaches Raft (whose state machine would stop the node on a failed
// restore): a corrupt file, a file of a cluster with another secret, an
// unauthenticated or newer version and a non-leader are refused, and
// nothing changes.
func TestRestoreBackupRefusesWhatItCannotOpen(t *testing.T) {
	c := newTestCluster(t, 1, knobs{})
	c.bootstrap()
	l := c.leader()
	c.apply(SetDrain{ReqID: "d1", Cluster: "app", Destination: "b1", Deadline: time.Unix(2e9, 0).UTC()})
	var buf bytes.Buffer
	info, err := l.s.SaveBackup(&buf, time.Now())
	if err != nil || info.Drains != 1 || info.Format != BackupFormat {
		t.Fatalf("SaveBackup: %+v %v", info, err)
	}
	good := buf.String()
	// A file authenticated by another cluster's secret.
	otherKey, _ := keyring.DeriveKEK([]byte("another cluster's secret, 32 bytes or more"), keyring.InfoBackup)
	foreign := editBackup(t, good, otherKey, func(map[string]any) {})
	for _, tc := range []struct {
		desc, file string
		want       string
	}{
		{"corrupt body", strings.Replace(good, `"body": "`, `"body": "AAAA`, 1), "the file is corrupt"},
		{"another cluster's secret", foreign, "another secret"},
		{"body that is not base64", strings.Replace(good, `"body": "`, `"body": "*`, 1), "the file is corrupt"},
		{"a newer version", strings.Replace(good, `"version": 2`, `"version": 3`, 1), "version 3"},
		{"the unauthenticated version 1", strings.Replace(good, `"version": 2`, `"version": 1`, 1), "not authenticated"},
		{"an unknown field in the file", strings.Replace(good, `"format": "`, `"signed_by": "x", "format": "`, 1), "unknown field"},
		{"not a snapshot", `{"ReverseProxy": {}}`, "not a tether snapshot file"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := l.s.RestoreBackup(strings.NewReader(tc.file), time.Now(), 5*time.Second)
			if !errors.Is(err, ErrBackup) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrBackup with %q", err, tc.want)
			}
		})
	}
	if len(l.s.Drains()) != 1 {
		t.Fatalf("drains after refused restores: %v", l.s.Drains())
	}
	// The same file restores (here: into the cluster it came from).
	c.apply(ClearDrain{ReqID: "d2", Cluster: "app", Destination: "b1"})
	res, err := l.s.RestoreBackup(strings.NewReader(good), time.Now(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d := l.s.Drains(); len(d) != 1 || d[0].Destination != "b1" || res.Drains != 1 {
		t.Fatalf("drains after restore: %v (answered %d)", d, res.Drains)
	}
}

// editBackup changes a saved backup as someone who can write the file but
// lacks the cluster secret can: it decodes the body and its state (the
// snapshot JSON), lets edit change the state, and writes it back with a
// recomputed SHA-256. With macKey set (someone who holds the secret) it
// also recomputes the MAC.
func editBackup(t *testing.T, file string, macKey []byte, edit func(state map[string]any)) string {
	t.Helper()
	var f map[string]any
	if err := json.Unmarshal([]byte(file), &f); err != nil {
		t.Fatal(err)
	}
	rawBody, _ := base64.StdEncoding.DecodeString(f["body"].(string))
	var body map[string]any
	if err := json.Unmarshal(rawBody, &body); err != nil {
		t.Fatal(err)
	}
	rawState, _ := base64.StdEncoding.DecodeString(body["state"].(string))
	var state map[string]any
	if err := json.Unmarshal(rawState[4:], &state); err != nil {
		t.Fatal(err)
	}
	edit(state)
	js, _ := json.Marshal(state)
	body["state"] = base64.StdEncoding.EncodeToString(append(rawState[:4:4], js...))
	rawBody, _ = json.Marshal(body)
	f["body"] = base64.StdEncoding.EncodeToString(rawBody)
	sum := sha256.Sum256(rawBody)
	f["sha256"] = hex.EncodeToString(sum[:])
	if macKey != nil {
		m := hmac.New(sha256.New, macKey)
		m.Write(rawBody)
		f["mac"] = hex.EncodeToString(m.Sum(nil))
	}
	out, _ := json.Marshal(f)
	return string(out)
}

// TestRestoreBackupRefusesAnEditedFile: whoever can write to the backup
// store but lacks the cluster secret cannot plant anything a restore
// applies; a file authenticated with the secret is still refused when its
// ACME account or certificate is not secret, its committed clock is far
// ahead of the cluster's time, or it holds what this node cannot apply.
func TestRestoreBackupRefusesAnEditedFile(t *testing.T) {
	c := newTestCluster(t, 1, knobs{})
	c.bootstrap()
	l := c.leader()
	c.apply(InstallKey{Key: testKey("k1", 0)})
	c.apply(AcmeWrite{Put: []AcmeEntry{{Name: "account/acme-v02", Secret: true, Value: []byte(`{"key":"private"}`)}}})
	var buf bytes.Buffer
	if _, err := l.s.SaveBackup(&buf, time.Now()); err != nil {
		t.Fatal(err)
	}
	good := buf.String()
	macKey := l.s.secrets.KEK(keyring.InfoBackup)
	far := time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339)
	plantDrain := func(s map[string]any) {
		s["drains"] = append(s["drains"].([]any), map[string]any{"cluster": "app", "destination": "b1", "deadline": far})
	}
	plantChallenge := func(s map[string]any) {
		s["acme"] = append(s["acme"].([]any), map[string]any{"name": "http-01/tok", "value": base64.StdEncoding.EncodeToString([]byte("tok.thumb"))})
	}
	plainAccount := func(s map[string]any) {
		for _, e := range s["acme"].([]any) {
			e := e.(map[string]any)
			if strings.HasPrefix(e["name"].(string), "account/") {
				delete(e, "secret")
				e["value"] = base64.StdEncoding.EncodeToString([]byte(`{"key":"the attacker's"}`))
			}
		}
	}
	plantCert := func(s map[string]any) {
		s["acme"] = append(s["acme"].([]any), map[string]any{"name": "cert/x", "value": base64.StdEncoding.EncodeToString([]byte("pem"))})
	}
	clock2999 := func(s map[string]any) { s["clock"] = far }
	newerCommand := func(s map[string]any) { // type 12 at version 1
		s["commands"] = (s["commands"].(string) + strings.Repeat("0", 11))[:11] + "1"
	}
	unknownField := func(s map[string]any) { s["weights"] = []any{} }
	for _, tc := range []struct {
		desc   string
		macKey []byte
		edit   func(map[string]any)
		want   string
	}{
		{"a planted drain", nil, plantDrain, "not authenticated"},
		{"a planted http-01 challenge", nil, plantChallenge, "not authenticated"},
		{"an account made plaintext", nil, plainAccount, "not authenticated"},
		{"a committed clock in 2999", nil, clock2999, "not authenticated"},
		{"an account made plaintext, with the secret", macKey, plainAccount, `"account/acme-v02" is not marked secret`},
		{"a plaintext certificate, with the secret", macKey, plantCert, `"cert/x" is not marked secret`},
		{"a committed clock in 2999, with the secret", macKey, clock2999, "ahead of the cluster's time"},
		{"a command this node does not apply, with the secret", macKey, newerCommand, "command type 12 v1"},
		{"an unknown field, with the secret", macKey, unknownField, "newer tether"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := l.s.RestoreBackup(strings.NewReader(editBackup(t, good, tc.macKey, tc.edit)), time.Now(), 5*time.Second)
			if !errors.Is(err, ErrBackup) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrBackup with %q", err, tc.want)
			}
		})
	}
	if len(l.s.Drains()) != 0 || l.s.CommittedClock().Year() > 2100 {
		t.Fatalf("a refused restore changed the state: drains %v, clock %v", l.s.Drains(), l.s.CommittedClock())
	}
	// Edited by someone who holds the secret, harmlessly: restores, and
	// the answer counts what the state holds.
	res, err := l.s.RestoreBackup(strings.NewReader(editBackup(t, good, macKey, plantDrain)), time.Now(), 5*time.Second)
	if err != nil || res.Drains != 1 || res.Acme != 1 || res.Keys != 1 {
		t.Fatalf("restore: %+v, %v", res, err)
	}
}

// TestBackupKnownAnswer: a backup file made by testdata/kat.py (HKDF label
// "tether backup file v1", HMAC-SHA256 of the body) opens; one byte of its
// MAC changed, or another secret, does not.
func TestBackupKnownAnswer(t *testing.T) {
	v := katVectors(t)
	mk := hkdfSHA256(katSecret, keyring.InfoBackup)
	if !bytes.Equal(mk, v["backupkey"]) {
		t.Fatalf("backup key %x, python's %x", mk, v["backupkey"])
	}
	kek, _ := keyring.DeriveKEK(katSecret, keyring.InfoRaft)
	body, snap, err := openBackup(bytes.NewReader(v["backup"]), [][]byte{mk}, [][]byte{kek})
	if err != nil {
		t.Fatalf("python-made backup: %v", err)
	}
	if body.Node != "kat-node" || body.Index != 7 || snap.body.ClusterID != "kat-cluster" || len(snap.keys) != 1 || !sameKey(snap.keys[0], katKey()) {
		t.Fatalf("python-made backup decoded as %+v, %+v", body.BackupInfo, snap.body)
	}
	other := hkdfSHA256([]byte("another-secret-of-enough-length"), keyring.InfoBackup)
	if _, _, err := openBackup(bytes.NewReader(v["backup"]), [][]byte{other}, [][]byte{kek}); err == nil || !strings.Contains(err.Error(), "not authenticated") {
		t.Errorf("opened under another secret: %v", err)
	}
	// Verified with any accepted secret: the other one first, then this.
	if _, _, err := openBackup(bytes.NewReader(v["backup"]), [][]byte{other, mk}, [][]byte{kek}); err != nil {
		t.Errorf("with this secret second among the accepted: %v", err)
	}
	bad := bytes.Clone(v["backup"])
	i := bytes.Index(bad, []byte(`"mac":"`)) + len(`"mac":"`)
	bad[i] = map[byte]byte{'0': '1'}[bad[i]] | '0' // another hex digit
	if _, _, err := openBackup(bytes.NewReader(bad), [][]byte{mk}, [][]byte{kek}); err == nil {
		t.Error("a changed MAC opened")
	}
}

func FuzzOpenBackup(f *testing.F) {
	for _, line := range strings.Split(string(must(os.ReadFile("testdata/kat.txt"))), "\n") {
		if hx, ok := strings.CutPrefix(line, "backup "); ok {
			b, _ := hex.DecodeString(hx)
			f.Add(b)
		}
	}
	f.Add([]byte(`{"format":"tether-snapshot","version":2,"body":"e30=","sha256":"","mac":""}`))
	mk := hkdfSHA256(katSecret, keyring.InfoBackup)
	kek, _ := keyring.DeriveKEK(katSecret, keyring.InfoRaft)
	f.Fuzz(func(t *testing.T, data []byte) {
		body, snap, err := openBackup(bytes.NewReader(data), [][]byte{mk}, [][]byte{kek})
		if err != nil {
			return
		}
		if body.Format != BackupFormat || snap == nil {
			t.Fatalf("opened %+v", body)
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// mergeRevoked: what a restore keeps of the running cluster's keyring.
func TestRestoreKeepsTheRunningClustersRevocations(t *testing.T) {
	key := func(id string, revoked bool) keyring.Key {
		k := testKey(id, 0)
		k.Revoked = revoked
		return k
	}
	for _, tc := range []struct {
		desc                  string
		backup, running       []keyring.Key
		active                string
		wantRevoked, wantKept []string
		wantIDs               string // the merged keys, "id" or "id!" for revoked, in order
	}{
		{"nothing revoked: the backup's keys alone", []keyring.Key{key("a", false)}, []keyring.Key{key("a", false), key("b", false)}, "b",
			nil, nil, "a"},
		{"the backup's active key revoked since: revoked, its replacement kept",
			[]keyring.Key{key("a", false)}, []keyring.Key{key("a", true), key("b", false)}, "b",
			[]string{"a"}, []string{"b"}, "a! b"},
		{"a key revoked that the backup lacks: added revoked",
			[]keyring.Key{key("a", false)}, []keyring.Key{key("a", false), key("x", true)}, "a",
			[]string{"x"}, nil, "a x!"},
		{"revoked in the backup too: nothing to say",
			[]keyring.Key{key("a", true), key("b", false)}, []keyring.Key{key("a", true), key("b", false)}, "b",
			nil, nil, "a! b"},
		{"revoked in the backup only: stays revoked",
			[]keyring.Key{key("a", true), key("b", false)}, []keyring.Key{key("a", false), key("b", false)}, "b",
			nil, nil, "a! b"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			keys, revoked, kept := mergeRevoked(tc.backup, tc.running, tc.active)
			var ids []string
			for _, k := range keys {
				id := k.ID
				if k.Revoked {
					id += "!"
				}
				ids = append(ids, id)
			}
			if got := strings.Join(ids, " "); got != tc.wantIDs || !slices.Equal(revoked, tc.wantRevoked) || !slices.Equal(kept, tc.wantKept) {
				t.Errorf("merged %q, kept revoked %v, kept %v; want %q, %v, %v", got, revoked, kept, tc.wantIDs, tc.wantRevoked, tc.wantKept)
			}
			if err := newRing().Restore(keys); err != nil {
				t.Errorf("the merged keyring does not restore: %v", err)
			}
		})
	}
}

// A restore writes every command its state holds at once: while a member
// does not apply one of them (the command gate), it is refused as that
// write would be, and nothing changes.
func TestRestoreBackupWaitsForEveryMemberToApplyItsCommands(t *testing.T) {
	c := newTestCluster(t, 1, knobs{})
	c.bootstrap()
	l := c.leader()
	c.apply(SetDrain{ReqID: "d1", Cluster: "app", Destination: "b1", Deadline: time.Unix(2e9, 0).UTC()})
	var buf bytes.Buffer
	if _, err := l.s.SaveBackup(&buf, time.Now()); err != nil {
		t.Fatal(err)
	}
	c.apply(ClearDrain{ReqID: "d2", Cluster: "app", Destination: "b1"})
	l.s.SetCommandGate(func(cmd Command) error {
		if _, ok := cmd.(SetDrain); ok {
			return fmt.Errorf("%w: n9 does not apply SetDrain v1", ErrUnsupported)
		}
		return nil
	})
	_, err := l.s.RestoreBackup(bytes.NewReader(buf.Bytes()), time.Now(), 5*time.Second)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "n9") {
		t.Fatalf("restore while a member does not apply SetDrain: %v, want ErrUnsupported naming n9", err)
	}
	if len(l.s.Drains()) != 0 {
		t.Fatal("the refused restore changed the state")
	}
	l.s.SetCommandGate(nil)
	if _, err := l.s.RestoreBackup(bytes.NewReader(buf.Bytes()), time.Now(), 5*time.Second); err != nil || len(l.s.Drains()) != 1 {
		t.Fatalf("restore once every member applies it: %v, drains %v", err, l.s.Drains())
	}
}
