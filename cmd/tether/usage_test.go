package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestAGroupAddedLaterRefusesUnknownSubcommands: the refusal is wired on
// the tree, so a group added to it (a future `tether secret`) has it too.
func TestAGroupAddedLaterRefusesUnknownSubcommands(t *testing.T) {
	for _, tc := range []struct {
		desc string
		args []string
		want string
	}{
		{"a typo names the nearest", []string{"secret", "instal", "f"}, `unknown command "instal" for "tether secret"; did you mean install?`},
		{"a flag of the subcommand meant does not hide the typo", []string{"secret", "remve", "--yes"}, `did you mean remove?`},
		{"nothing near lists the commands", []string{"secret", "xyz"}, `its commands are install, remove, use`},
		{"no subcommand", []string{"secret"}, `"tether secret" needs a subcommand: install, remove or use`},
		{"a mistyped flag names the nearest", []string{"secret", "use", "--yse"}, `secret use: unknown flag: --yse; did you mean --yes?`},
		{"a missing argument shows the usage", []string{"secret", "use"}, `secret use: accepts 1 arg(s), received 0 (usage: tether secret use FILE [flags])`},
		{"an abbreviation names what it starts", []string{"secret", "in"}, `did you mean install?`},
		{"help on an unknown topic", []string{"help", "secret", "instal"}, `unknown command "instal" for "tether secret"; did you mean install?`},
		{"cobra's completion group", []string{"completion", "bsh"}, `unknown command "bsh" for "tether completion"; did you mean bash or zsh?`},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			root := &cobra.Command{Use: "tether", SilenceErrors: true, SilenceUsage: true}
			secret := &cobra.Command{Use: "secret"}
			for _, name := range []string{"install", "use", "remove"} {
				c := &cobra.Command{Use: name + " FILE", Args: cobra.ExactArgs(1), RunE: func(*cobra.Command, []string) error { return nil }}
				c.Flags().Bool("yes", false, "")
				secret.AddCommand(c)
			}
			root.AddCommand(secret)
			refuseUsageErrors(root)
			root.SetArgs(tc.args)
			root.SetErr(new(strings.Builder))
			err := root.Execute()
			if !errors.As(err, new(usageError)) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a usage error with %q", err, tc.want)
			}
		})
	}
}
