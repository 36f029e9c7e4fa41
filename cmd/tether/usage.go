package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// usageError is a command line tether cannot run as typed (an unknown
// subcommand or flag, a wrong number of arguments): it exits 2, as flag
// parsing errors do in most tools, so a script tells it from a failed run.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// refuseUsageErrors makes every command group in the tree under root
// (every command with subcommands, root included, and any group added
// later) refuse an unknown subcommand with the nearest names, and refuse
// to run without one: cobra would print the group's help and exit 0, so a
// mistyped `tether snapshot sav` in a cron job would succeed silently.
// Argument and flag errors of every command become usage errors too.
func refuseUsageErrors(root *cobra.Command) {
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError{flagError(cmd, err)} })
	// cobra's own groups (completion) are added at Execute: add them now
	// so they refuse as ours do; `help` refuses an unknown topic.
	root.InitDefaultCompletionCmd()
	root.SetHelpCommand(helpCmd(root))
	// A group runs only to refuse: its usage shows "tether keyring
	// [command]", not a runnable "tether keyring [flags]".
	groupUsage := strings.Replace(root.UsageTemplate(), "{{if .Runnable}}\n  {{.UseLine}}{{end}}", "", 1)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		switch {
		case c.HasSubCommands() && c.Run == nil && c.RunE == nil:
			group := c
			// `tether keyring lsit --json`: the flag belongs to the
			// subcommand meant, so the group's parser lets it pass and
			// the unknown subcommand is what gets reported.
			group.FParseErrWhitelist.UnknownFlags = true
			group.SetUsageTemplate(groupUsage)
			group.Args = func(_ *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usageError{unknownSubcommand(group, args[0])}
				}
				return nil
			}
			group.RunE = func(cmd *cobra.Command, _ []string) error {
				fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
				return usageError{fmt.Errorf("%q needs a subcommand: %s", cmd.CommandPath(), orList(subcommandNames(cmd)))}
			}
		case c.Args != nil:
			check := c.Args
			c.Args = func(cmd *cobra.Command, args []string) error {
				if err := check(cmd, args); err != nil {
					if strings.Contains(err.Error(), cmd.CommandPath()) { // cobra's NoArgs names the command
						return usageError{fmt.Errorf("%v (usage: %s)", err, cmd.UseLine())}
					}
					return usageError{fmt.Errorf("%s%v (usage: %s)", prefix(cmd), err, cmd.UseLine())}
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// helpCmd is `tether help [command]...`: cobra's prints the top-level help
// and exits 0 for an unknown topic.
func helpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(_ *cobra.Command, args []string) error {
			target, rest, err := root.Find(args)
			if err != nil {
				return usageError{err}
			}
			if len(rest) > 0 && target.HasSubCommands() {
				return usageError{unknownSubcommand(target, rest[0])}
			}
			return target.Help()
		},
	}
}

// unknownSubcommand names what was typed, the group, and the nearest
// subcommands, or all of them when none is near.
func unknownSubcommand(group *cobra.Command, typed string) error {
	msg := fmt.Sprintf("unknown command %q for %q", typed, group.CommandPath())
	names := subcommandNames(group)
	near := nearest(typed, names)
	if len(near) == 0 { // an abbreviation: "rot" for rotate
		for _, n := range names {
			if strings.HasPrefix(n, strings.ToLower(typed)) {
				near = append(near, n)
			}
		}
	}
	if len(near) > 0 {
		return fmt.Errorf("%s; did you mean %s?", msg, orList(near))
	}
	return fmt.Errorf("%s; its commands are %s", msg, strings.Join(subcommandNames(group), ", "))
}

// flagError adds the nearest flag to pflag's "unknown flag: --jsn".
func flagError(cmd *cobra.Command, err error) error {
	typed, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return fmt.Errorf("%s%w", prefix(cmd), err)
	}
	best, bestDist := "", 3 // farther is no typo
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if d := editDistance(typed, f.Name); d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	if best == "" {
		return fmt.Errorf("%s%w (%s --help lists its flags)", prefix(cmd), err, cmd.CommandPath())
	}
	return fmt.Errorf("%s%w; did you mean --%s?", prefix(cmd), err, best)
}

// prefix names cmd below the root ("keyring list: "), for errors that
// main prints after "tether: ".
func prefix(cmd *cobra.Command) string {
	if !cmd.HasParent() {
		return ""
	}
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ") + ": "
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// subcommandNames are the group's commands a user may run, help aside.
func subcommandNames(group *cobra.Command) []string {
	var names []string
	for _, c := range group.Commands() {
		if c.IsAvailableCommand() && c.Name() != "help" && c.Name() != "completion" {
			names = append(names, c.Name())
		}
	}
	return names
}

// orList joins names as "a", "a or b", "a, b or c".
func orList(names []string) string {
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
