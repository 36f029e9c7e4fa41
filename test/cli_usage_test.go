package test

import (
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// TestEveryCommandGroupRefusesAnUnknownSubcommand: a mistyped subcommand
// (a cron line's `snapshot sav`) exits 2 naming the nearest, in every
// group the binary has, found from its own help so a new group is covered
// too; a group given no subcommand exits 2 as well.
func TestEveryCommandGroupRefusesAnUnknownSubcommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"config", "valdate", "f.json"}, `unknown command "valdate" for "tether config"; did you mean validate?`},
		{[]string{"config", "psuh", "f.json"}, `unknown command "psuh" for "tether config"; did you mean push?`},
		{[]string{"config", "rolback", "3"}, `unknown command "rolback" for "tether config"; did you mean rollback?`},
		{[]string{"snapshot", "sav", "x"}, `unknown command "sav" for "tether snapshot"; did you mean save?`},
		{[]string{"keyring", "rotat"}, `unknown command "rotat" for "tether keyring"; did you mean rotate?`},
		{[]string{"keyring", "lsit", "--json"}, `did you mean list?`},
		{[]string{"memebers"}, `unknown command "memebers" for "tether"; did you mean members?`},
		{[]string{"keyring", "frobnicate"}, `unknown command "frobnicate" for "tether keyring"; its commands are list, revoke, rotate`},
		{[]string{"help", "snapshot", "sav"}, `unknown command "sav" for "tether snapshot"; did you mean save?`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out := run(t, nil, tc.args...)
			if code != 2 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, want 2 with %q:\n%s", code, tc.want, out)
			}
			if n := strings.Count(strings.TrimSpace(out), "\n"); n != 0 {
				t.Errorf("the refusal takes %d lines, want one:\n%s", n+1, out)
			}
		})
	}

	// Every command the help lists that is a group (its own help lists
	// commands) refuses; the helps run at once (a -race binary takes a
	// second to exit).
	_, help := run(t, nil, "--help")
	names := listedCommands(help)
	helps := make([]string, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			out, _ := exec.Command(tetherBin, name, "--help").CombinedOutput()
			helps[i] = string(out)
		})
	}
	wg.Wait()
	groups := 0
	for i, name := range names {
		if !strings.Contains(helps[i], "Available Commands:") {
			continue
		}
		groups++
		if code, out := run(t, nil, name, "zzz-no-such"); code != 2 || !strings.Contains(out, `unknown command "zzz-no-such"`) {
			t.Errorf("tether %s zzz-no-such: exit %d, want 2 with unknown command:\n%s", name, code, out)
		}
		if code, out := run(t, nil, name); code != 2 || !strings.Contains(out, "needs a subcommand") {
			t.Errorf("tether %s: exit %d, want 2 saying it needs a subcommand:\n%s", name, code, out)
		}
	}
	if groups < 3 {
		t.Fatalf("found %d command groups in the help, want config, keyring, snapshot at least:\n%s", groups, help)
	}
}

// listedCommands are the command names under "Available Commands:" in a
// cobra help text.
func listedCommands(help string) []string {
	_, list, _ := strings.Cut(help, "Available Commands:\n")
	var names []string
	for _, l := range strings.Split(list, "\n") {
		if !strings.HasPrefix(l, "  ") {
			break
		}
		if f := strings.Fields(l); len(f) > 0 && f[0] != "help" {
			names = append(names, f[0])
		}
	}
	return names
}
