package test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// editSaved edits a file `tether snapshot save` wrote as someone who can
// write to the backup store but does not hold the cluster secret: it
// decodes the replicated state (the snapshot JSON after its 4-byte
// header), lets edit change it, re-encodes it and recomputes every
// checksum it can (the SHA-256). It reads both the file whose state sits
// at the top ("state", with "sha256" of it) and the one whose state sits
// in an authenticated body ("body", with "sha256" of the body).
func editSaved(t *testing.T, raw []byte, edit func(state map[string]any)) []byte {
	t.Helper()
	var f map[string]any
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	editState := func(enc string) (string, []byte) {
		st, err := base64.StdEncoding.DecodeString(enc)
		if err != nil || len(st) < 4 {
			t.Fatalf("state: %v", err)
		}
		var m map[string]any
		if err := json.Unmarshal(st[4:], &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		js, _ := json.Marshal(m)
		out := append(st[:4:4], js...)
		return base64.StdEncoding.EncodeToString(out), out
	}
	if s, ok := f["state"].(string); ok {
		enc, st := editState(s)
		f["state"] = enc
		sum := sha256.Sum256(st)
		f["sha256"] = hex.EncodeToString(sum[:])
	} else {
		rawBody, _ := base64.StdEncoding.DecodeString(f["body"].(string))
		var body map[string]any
		if err := json.Unmarshal(rawBody, &body); err != nil {
			t.Fatal(err)
		}
		body["state"], _ = editState(body["state"].(string))
		rawBody, _ = json.Marshal(body)
		f["body"] = base64.StdEncoding.EncodeToString(rawBody)
		sum := sha256.Sum256(rawBody)
		f["sha256"] = hex.EncodeToString(sum[:])
	}
	out, _ := json.MarshalIndent(f, "", "  ")
	return out
}

// TestSnapshotRestoreRefusesAFileEditedWithoutTheSecret: someone who can
// write to the backup store but lacks the cluster secret edits a saved
// backup (a planted drain, a planted HTTP-01 challenge answer, a plaintext
// ACME account and certificate, a committed clock in 2999) and recomputes
// its SHA-256; `tether snapshot restore` refuses each, saying the file is
// not authenticated by the cluster's secret, and nothing changes: the
// destination takes sessions, no node answers the planted challenge.
func TestSnapshotRestoreRefusesAFileEditedWithoutTheSecret(t *testing.T) {
	b1 := testutil.NewBackend(t, "b1")
	env := newClusterEnv(t, cookieConfig(b1))
	n1 := env.startNode("bk-1", "")
	testutil.Eventually(t, 30*time.Second, "bk-1 ready", func() bool {
		st, _, _ := testutil.Get(t, http.DefaultClient, n1.adminURL+"/readyz", nil)
		return st == 200
	})
	dir := t.TempDir()
	file := filepath.Join(dir, "cluster.snapshot")
	if code, out := run(t, nil, "snapshot", "save", file, "--admin", n1.adminURL); code != 0 {
		t.Fatalf("snapshot save: %d %s", code, out)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	far := "2999-01-01T00:00:00Z"
	appendTo := func(m map[string]any, field string, v any) {
		l, _ := m[field].([]any)
		m[field] = append(l, v)
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		desc string
		edit func(map[string]any)
	}{
		{"a planted drain", func(m map[string]any) {
			appendTo(m, "drains", map[string]any{"cluster": "app", "destination": "b1", "deadline": far})
		}},
		{"a planted http-01 challenge answer", func(m map[string]any) {
			appendTo(m, "acme", map[string]any{"name": "http-01/planted-token", "value": b64("planted-token.attacker")})
		}},
		{"a plaintext ACME account", func(m map[string]any) {
			appendTo(m, "acme", map[string]any{"name": "account/https://acme.example/dir", "secret": false, "value": b64(`{"key":"the attacker's"}`)})
		}},
		{"a plaintext certificate", func(m map[string]any) {
			appendTo(m, "acme", map[string]any{"name": "cert/planted", "secret": false, "value": b64("-----BEGIN CERTIFICATE-----")})
		}},
		{"a committed clock in 2999", func(m map[string]any) { m["clock"] = far }},
	} {
		edited := filepath.Join(dir, strings.ReplaceAll(tc.desc, " ", "-")+".snapshot")
		if err := os.WriteFile(edited, editSaved(t, raw, tc.edit), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out := run(t, nil, "snapshot", "restore", edited, "--yes", "--admin", n1.adminURL)
		if code == 0 || !strings.Contains(out, "not authenticated by this cluster's secret") {
			t.Errorf("%s: exit %d, want a refusal saying the file is not authenticated:\n%s", tc.desc, code, out)
		}
		// What the edit would have done, had it been applied.
		if st, _, body := testutil.Get(t, http.DefaultClient, n1.proxyURL+"/.well-known/acme-challenge/planted-token", map[string]string{"Host": "any.example"}); st == 200 && strings.Contains(body, "attacker") {
			t.Errorf("%s: the node answers the planted challenge: %d %s", tc.desc, st, body)
		}
		_, d := adminJSON(t, "GET", n1.adminURL+"/v1/clusters/app/destinations")
		for _, x := range d["destinations"].([]any) {
			if m := x.(map[string]any); m["drain_state"] != "none" {
				t.Errorf("%s: destination %v is %v", tc.desc, m["id"], m["drain_state"])
			}
		}
	}
	// The file as saved restores, and the CLI says what it decoded.
	code, out := run(t, nil, "snapshot", "restore", file, "--yes", "--admin", n1.adminURL)
	if code != 0 || !strings.Contains(out, "saved from cluster") || !strings.Contains(out, "by node bk-1") || !strings.Contains(out, "0 drains") {
		t.Fatalf("restore of the file as saved: %d %s", code, out)
	}
}

// TestSnapshotRestoreNeverRevivesARevokedKey: save a backup, revoke the
// active key (a replacement becomes active), restore the backup: on every
// node of the three the revoked key stays revoked and its replacement
// stays active, and the restore says which keys it kept revoked.
func TestSnapshotRestoreNeverRevivesARevokedKey(t *testing.T) {
	b1 := testutil.NewBackend(t, "b1")
	env := newClusterEnv(t, cookieConfig(b1))
	nodes := env.formNamed("rv-", 3)
	keyring := func(a *clusterAgent) (active string, states map[string]string) {
		_, m := adminJSON(t, "GET", a.adminURL+"/v1/keyring")
		states = map[string]string{}
		keys, _ := m["keys"].([]any)
		for _, k := range keys {
			k := k.(map[string]any)
			states[k["id"].(string)], _ = k["state"].(string)
		}
		active, _ = m["active_key_id"].(string)
		return active, states
	}
	old, _ := keyring(nodes[0])
	if old == "" {
		t.Fatal("no active key")
	}
	file := filepath.Join(t.TempDir(), "cluster.snapshot")
	if code, out := run(t, nil, "snapshot", "save", file, "--admin", nodes[1].adminURL); code != 0 {
		t.Fatalf("snapshot save: %d %s", code, out)
	}
	if code, out := run(t, nil, "keyring", "revoke", old, "--yes", "--admin", nodes[2].adminURL); code != 0 {
		t.Fatalf("keyring revoke: %d %s", code, out)
	}
	var replacement string
	testutil.Eventually(t, 20*time.Second, "a replacement active on every node", func() bool {
		a0, _ := keyring(nodes[0])
		for _, a := range nodes {
			if act, st := keyring(a); act == old || act == "" || act != a0 || st[old] != "revoked" {
				return false
			}
		}
		replacement = a0
		return true
	})

	code, out := run(t, nil, "snapshot", "restore", file, "--yes", "--admin", nodes[1].adminURL)
	if code != 0 {
		t.Fatalf("snapshot restore: %d %s", code, out)
	}
	if !strings.Contains(out, "kept revoked (revoked in the running cluster): "+old) || !strings.Contains(out, replacement) {
		t.Errorf("the restore does not say it kept %s revoked and %s:\n%s", old, replacement, out)
	}
	for _, a := range nodes {
		testutil.Eventually(t, 20*time.Second, a.id+" holding the restored keyring", func() bool {
			_, st := keyring(a)
			return st[old] != ""
		})
		act, st := keyring(a)
		if st[old] != "revoked" || act != replacement || st[replacement] == "" {
			t.Errorf("%s after the restore: active %q, %s %q, %s %q; want %s revoked and %s active",
				a.id, act, old, st[old], replacement, st[replacement], old, replacement)
		}
	}
	// The API answer names them too.
	raw, _ := os.ReadFile(file)
	resp, err := http.Post(nodes[0].adminURL+"/v1/snapshot/restore", "application/json", strings.NewReader(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	var ans struct {
		KeptRevoked []string `json:"kept_revoked"`
		KeptKeys    []string `json:"kept_keys"`
	}
	json.NewDecoder(resp.Body).Decode(&ans)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(ans.KeptRevoked) != 1 || ans.KeptRevoked[0] != old {
		t.Errorf("a second restore answered %d, kept_revoked %v; want [%s]", resp.StatusCode, ans.KeptRevoked, old)
	}
}
