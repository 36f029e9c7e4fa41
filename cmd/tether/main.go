package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tether-proxy/tether/node"
)

func main() {
	root := rootCmd()
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "tether: "+oneLine(err.Error()))
		if errors.As(err, new(usageError)) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// rootCmd is the whole command tree.
func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "tether",
		Short:         "A cluster of HTTP reverse proxies that share session affinity",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       node.Version,
	}
	root.AddCommand(agentCmd(), demoCmd(), configCmd(), healthCmd())
	root.AddCommand(clientCmds()...)
	refuseUsageErrors(root)
	return root
}

// oneLine keeps client errors to one line; multi-line errors (a config's
// list of problems) are printed whole by their commands before this.
func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// bindEnv lets every flag be given as TETHER_<FLAG> (dashes become
// underscores), but those marked noEnv; a flag on the command line wins.
func bindEnv(cmd *cobra.Command) error {
	var firstErr error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || firstErr != nil || f.Annotations[noEnv] != nil {
			return
		}
		name := "TETHER_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			parts := strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })
			if err := sv.Replace(parts); err != nil {
				firstErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
			return
		}
		if err := f.Value.Set(v); err != nil {
			firstErr = fmt.Errorf("%s=%q: %w", name, v, err)
		}
	})
	return firstErr
}
