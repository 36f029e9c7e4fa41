package test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// run runs the built binary with args and env, stdin empty, and returns
// the exit code and stdout+stderr.
func run(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(tetherBin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("tether %v: %v", args, err)
	}
	return 0, string(out)
}

// TestClientCommandsExplainThemselves: the CLI's answers say what to do.
func TestClientCommandsExplainThemselves(t *testing.T) {
	dir := t.TempDir()
	cfg, secret, token := filepath.Join(dir, "tether.json"), filepath.Join(dir, "secret"), filepath.Join(dir, "token")
	testutil.WriteFile(t, cfg, configFor(catchAll, testutil.NewBackend(t, "app-1")))
	testutil.WriteFile(t, secret, "an-e2e-cluster-secret-0123456789abcdef")
	testutil.WriteFile(t, token, "s3cret-token\n")
	os.Chmod(secret, 0o600)
	os.Chmod(token, 0o600)
	a := startAgent(t, cfg, nil, "--cluster-secret-file", secret, "--admin-token-file", token,
		"--raft-addr", testutil.FreeAddr(t), "--gossip-addr", testutil.FreeAddr(t), "--no-access-log")
	defer func() { a.Signal(syscall.SIGTERM); a.Wait(30 * time.Second) }()
	admin := strings.TrimPrefix(a.adminURL, "http://")
	withToken := []string{"--admin", a.adminURL, "--token-file", token}
	for _, tc := range []struct {
		desc string
		env  []string
		args []string
		exit int
		want []string
	}{
		{"a 401 says where the token comes from", nil, []string{"members", "--admin", a.adminURL}, 1,
			[]string{"missing or wrong bearer token", "TETHER_ADMIN_TOKEN or --token-file"}},
		{"--token-file authenticates and members show admin addresses", nil, append([]string{"members"}, withToken...), 0,
			[]string{"ADMIN_ADDRESS", admin}},
		{"the token from the environment still works", []string{"TETHER_ADMIN_TOKEN=s3cret-token"}, []string{"status", "--admin", a.adminURL}, 0, []string{"e2e"}},
		{"a mistyped command suggests the nearest", nil, []string{"memebers"}, 2, []string{`unknown command "memebers"`, "did you mean members?"}},
		{"drain of an unknown cluster names the clusters", nil, append([]string{"drain", "nosuch", "app-1"}, withToken...), 1,
			[]string{`there is no cluster "nosuch"; the clusters are: app`}},
		{"destinations of an unknown cluster too", nil, append([]string{"destinations", "nosuch"}, withToken...), 1,
			[]string{`there is no cluster "nosuch"; the clusters are: app`}},
		{"an unknown destination in a known cluster", nil, append([]string{"drain", "app", "nosuch"}, withToken...), 1,
			[]string{`no destination "nosuch" in cluster "app"`}},
		{"revoke asks first and refuses without an answer", nil, append([]string{"keyring", "revoke", "k1"}, withToken...), 1,
			[]string{"Revoke key k1?", "pass --yes"}},
		{"revoke --yes does not ask", nil, append([]string{"keyring", "revoke", "no-such-key", "--yes"}, withToken...), 1,
			[]string{`no key with id "no-such-key"`}},
		{"join against the admin port says it takes gossip addresses", nil, append([]string{"join", admin}, withToken...), 1,
			[]string{"this looks like another service", "gossip addresses", "7946"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			code, out := run(t, tc.env, tc.args...)
			if code != tc.exit {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.exit, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if tc.exit != 0 && strings.Count(strings.TrimSpace(out), "\n") > 1 {
				t.Errorf("an error takes more than two lines:\n%s", out)
			}
		})
	}

	// An agent whose --join names the admin port says so in its log.
	j := start(t, nil, "agent", "--config", cfg, "--node-id", "joiner", "--data-dir", t.TempDir(), "--admin-addr", "127.0.0.1:0",
		"--raft-addr", testutil.FreeAddr(t), "--gossip-addr", testutil.FreeAddr(t), "--cluster-secret-file", secret, "--no-access-log", "--join", admin)
	testutil.Eventually(t, 30*time.Second, "the joiner's log names gossip addresses", func() bool {
		return strings.Contains(j.Stderr.String(), "--join and tether join take gossip addresses")
	})
	j.Signal(syscall.SIGTERM)
	j.Wait(30 * time.Second)

	// An installed key says what its activation waits for, never the
	// placeholder time a day ahead.
	if code, out := run(t, nil, append([]string{"keyring", "rotate"}, withToken...)...); code != 0 {
		t.Fatalf("rotate: %s", out)
	}
	code, out := run(t, nil, append([]string{"keyring", "list", "--json"}, withToken...)...)
	var list struct {
		Keys []struct {
			State, Pending string
			Activates      time.Time
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Keys) < 2 {
		t.Fatalf("keyring list: %d %s", code, out)
	}
	for _, k := range list.Keys {
		if k.State == "installed" && k.Pending == "" {
			t.Errorf("an installed key without a pending reason: %s", out)
		}
	}
}

// TestAgentDefaultDataDirIsAbsolute: without --data-dir the state goes to
// the user's state directory, whatever the working directory, as --help
// and docs/CONFIGURATION.md say.
func TestAgentDefaultDataDirIsAbsolute(t *testing.T) {
	state, work := t.TempDir(), t.TempDir()
	cfg := filepath.Join(t.TempDir(), "tether.json")
	testutil.WriteFile(t, cfg, configFor(catchAll, testutil.NewBackend(t, "b1")))
	cmd := exec.Command(tetherBin, "agent", "--config", cfg, "--node-id", "e2e", "--admin-addr", "127.0.0.1:0", "--no-access-log")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+state)
	p := testutil.StartCmd(t, cmd)
	var started map[string]any
	testutil.Eventually(t, 60*time.Second, "node started", func() bool { started = p.LogLine("node started"); return started != nil })
	want := filepath.Join(state, "tether", "e2e")
	if started["data_dir"] != want {
		t.Fatalf("data_dir %v, want %s", started["data_dir"], want)
	}
	if _, err := os.Stat(filepath.Join(want, "raft")); err != nil {
		t.Fatalf("no state in %s: %v", want, err)
	}
	if _, err := os.Stat(filepath.Join(work, "data")); err == nil {
		t.Fatalf("state written under the working directory too")
	}
	p.Signal(syscall.SIGTERM)
	p.Wait(30 * time.Second)
	if _, help := run(t, nil, "agent", "--help"); !strings.Contains(help, "$XDG_STATE_HOME/tether/<node-id>") {
		t.Fatalf("--help does not give the default data dir:\n%s", help)
	}
}
