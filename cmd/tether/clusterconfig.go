package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/tailscale/hujson"
	"go.yaml.in/yaml/v3"

	"github.com/tether-proxy/tether/internal/unidiff"
	"github.com/tether-proxy/tether/node/apiclient"
	"github.com/tether-proxy/tether/proxy/config/tree"
)

// noEnv marks a flag bindEnv leaves alone: TETHER_VERSION is a common
// name for something else, and a precondition belongs to one push, not to
// every push a shell runs.
const noEnv = "tether-no-env"

func clusterConfigCmds() []*cobra.Command {
	return []*cobra.Command{configPushCmd(), configShowCmd(), configHistoryCmd(), configDiffCmd(), configRollbackCmd()}
}

// ifVersionFlag registers --if-version on c.
func ifVersionFlag(c *cobra.Command, v *uint64, what string) {
	c.Flags().Uint64Var(v, "if-version", 0, what+" only if the cluster's version is still N (If-Match): a push in between refuses it")
	c.Flags().SetAnnotation("if-version", noEnv, []string{"true"})
}

func configPushCmd() *cobra.Command {
	var ifVersion uint64
	var rpOnly bool
	c := clientCmd("push FILE", "Commit a file's ReverseProxy section as the cluster's next version, naming the sections left out (- reads stdin)", cobra.ExactArgs(1),
		func(cf *clientFlags, cmd *cobra.Command, args []string) error {
			content, err := readPushFile(cmd.InOrStdin(), args[0])
			if err != nil {
				return err
			}
			if rpOnly {
				if content, err = reverseProxyOnly(cmd.ErrOrStderr(), args[0], content); err != nil {
					return err
				}
			}
			c, ctx, cancel, err := cf.client(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			res, err := c.PushConfig(ctx, content, ifVersion)
			if err != nil {
				return configRefusal(cmd.ErrOrStderr(), args[0], ifVersion, err)
			}
			return printPushed(cmd, cf, res, fmt.Sprintf("pushed version %d", res.Version))
		})
	ifVersionFlag(c, &ifVersion, "push")
	c.Flags().BoolVar(&rpOnly, "reverse-proxy-only", false, "send only the file's ReverseProxy section, naming the others: the leader leaves them out anyway, and this way they (an appsettings.json's connection strings, a certificate's password) never leave this machine")
	return c
}

// reverseProxyOnly cuts a config file down to its ReverseProxy section and
// names on w the sections it left out, as the leader's warnings name them
// when it gets the whole file: a push never drops a section silently.
func reverseProxyOnly(w io.Writer, name string, content []byte) ([]byte, error) {
	// Comments and trailing commas as a node's loader allows them.
	std, err := hujson.Standardize(bytes.TrimPrefix(content, []byte("\xef\xbb\xbf")))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	top, err := topLevelSections(std)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var section json.RawMessage
	var left []string
	for _, k := range slices.Sorted(maps.Keys(top)) {
		switch {
		case strings.EqualFold(k, "ReverseProxy"): // as ASP.NET reads keys
			section = top[k]
		case k != "$schema":
			left = append(left, k)
		}
	}
	if section == nil {
		return nil, fmt.Errorf("%s has no ReverseProxy section: there is nothing to push", name)
	}
	if len(left) > 0 {
		fmt.Fprintf(w, "info: left out %s: each node keeps them in its own file\n", strings.Join(left, ", "))
	}
	return []byte(`{"ReverseProxy":` + string(section) + `}`), nil
}

// topLevelSections reads a JSON object's members, refusing a key given
// twice in any case: keys are case-insensitive, as a node's loader reads
// them, and a map would keep one copy silently.
func topLevelSections(data []byte) (map[string]json.RawMessage, error) {
	notObject := errors.New("not a JSON object: a configuration file is one")
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, notObject
	}
	top := map[string]json.RawMessage{}
	seen := map[string]string{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, notObject
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, notObject
		}
		if first, ok := seen[strings.ToLower(k)]; ok {
			return nil, fmt.Errorf("%q given twice (same as %q; keys are case-insensitive)", k, first)
		}
		seen[strings.ToLower(k)] = k
		top[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, notObject
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, notObject
	}
	return top, nil
}

func configRollbackCmd() *cobra.Command {
	var ifVersion uint64
	c := clientCmd("rollback N", "Commit version N's content again as the cluster's next version", cobra.ExactArgs(1),
		func(cf *clientFlags, cmd *cobra.Command, args []string) error {
			n, err := versionArg(args[0])
			if err != nil {
				return err
			}
			c, ctx, cancel, err := cf.client(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			res, err := c.RollbackConfig(ctx, n, ifVersion)
			if err != nil {
				return configRefusal(cmd.ErrOrStderr(), "version "+args[0], ifVersion, err)
			}
			return printPushed(cmd, cf, res, fmt.Sprintf("rolled back to version %d as version %d", n, res.Version))
		})
	ifVersionFlag(c, &ifVersion, "roll back")
	return c
}

// printPushed prints a push's or rollback's answer: its warnings on
// stderr, then what happened (or the answer, --json).
func printPushed(cmd *cobra.Command, cf *clientFlags, res apiclient.ConfigPushed, done string) error {
	for _, w := range res.Warnings {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
	}
	if cf.asJSON {
		return printJSON(cmd.OutOrStdout(), res)
	}
	if res.Summary != "" {
		done += " (" + res.Summary + ")"
	}
	fmt.Fprintln(cmd.OutOrStdout(), done)
	return nil
}

// configRefusal says why the leader refused a push or a rollback of what:
// every validation error with its path (on w, before the one line main
// prints), or the version that came in between.
func configRefusal(w io.Writer, what string, ifVersion uint64, err error) error {
	var invalid *apiclient.ConfigInvalidError
	var stale *apiclient.ConfigStaleError
	switch {
	case errors.As(err, &invalid):
		for _, e := range invalid.Errors {
			fmt.Fprintln(w, e)
		}
		return fmt.Errorf("%s is not valid: %v; the cluster's version is unchanged", what, err)
	case errors.As(err, &stale):
		return fmt.Errorf("the cluster's config is at version %d, not %d (--if-version): another change came first, nothing changed; see it with `tether config diff %d %d`, then try again with --if-version %d (HTTP 412)",
			stale.Current, ifVersion, ifVersion, stale.Current, stale.Current)
	}
	return explain(err)
}

func configShowCmd() *cobra.Command {
	var version uint64
	c := clientCmd("show", "Print the cluster's configuration (its ReverseProxy section) as JSON", cobra.NoArgs,
		func(cf *clientFlags, cmd *cobra.Command, _ []string) error {
			c, ctx, cancel, err := cf.client(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			var v apiclient.ConfigVersion // --version 0: nothing pushed
			switch {
			case !cmd.Flags().Changed("version"):
				v, err = c.Config(ctx)
			case version > 0:
				v, err = c.ConfigAt(ctx, version)
			}
			if err != nil {
				return explain(err)
			}
			if cf.asJSON {
				return printJSON(cmd.OutOrStdout(), v)
			}
			if v.Version == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "version 0: nothing was pushed; each node serves its own file's ReverseProxy section")
				return nil
			}
			lines, err := prettyLines(v.Config)
			if err != nil {
				return fmt.Errorf("version %d: %w", v.Version, err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "version %d, %s: %s\n", v.Version, v.Time.UTC().Format(tableTime), v.Summary)
			fmt.Fprintln(cmd.OutOrStdout(), strings.Join(lines, "\n"))
			return nil
		})
	c.Flags().Uint64Var(&version, "version", 0, "the version to show (default: the current one)")
	c.Flags().SetAnnotation("version", noEnv, []string{"true"})
	return c
}

func configHistoryCmd() *cobra.Command {
	return clientCmd("history", "List the cluster's configuration versions (the last 50), newest first", cobra.NoArgs,
		func(cf *clientFlags, cmd *cobra.Command, _ []string) error {
			c, ctx, cancel, err := cf.client(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			vs, err := c.ConfigHistory(ctx)
			if err != nil {
				return explain(err)
			}
			if vs == nil {
				vs = []apiclient.ConfigEntry{}
			}
			answer := map[string]any{"versions": vs}
			if cf.asJSON {
				return printJSON(cmd.OutOrStdout(), answer)
			}
			if len(vs) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "nothing was pushed: each node serves its own file's ReverseProxy section")
			}
			// Through JSON, so the table prints times and numbers as every
			// other table does.
			b, _ := json.Marshal(answer)
			var generic any
			json.Unmarshal(b, &generic)
			return writeTable(cmd.OutOrStdout(), generic, "versions", "version", "time", "summary")
		})
}

func configDiffCmd() *cobra.Command {
	return clientCmd("diff A B", "Show what changed from A to B (versions, 0 or file:PATH) as a unified diff", cobra.ExactArgs(2),
		func(cf *clientFlags, cmd *cobra.Command, args []string) error {
			sides := make([]diffSide, 2)
			for i, arg := range args {
				s, err := resolveDiffSide(cf, cmd, arg)
				if err != nil {
					return err
				}
				sides[i] = s
			}
			d := unidiff.Diff(sides[0].name, sides[1].name, sides[0].lines, sides[1].lines, 3)
			if d == "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s and %s are the same\n", args[0], args[1])
				return nil
			}
			_, err := io.WriteString(cmd.OutOrStdout(), d)
			return err
		})
}

// diffSide is one side of a diff: its label and its pretty-printed lines.
type diffSide struct {
	name  string
	lines []string
}

func resolveDiffSide(cf *clientFlags, cmd *cobra.Command, arg string) (diffSide, error) {
	if path, ok := strings.CutPrefix(arg, "file:"); ok {
		content, err := readPushFile(cmd.InOrStdin(), path)
		if err != nil {
			return diffSide{}, err
		}
		var whole map[string]json.RawMessage
		if err := json.Unmarshal(content, &whole); err != nil {
			return diffSide{}, fmt.Errorf("%s: not a JSON object: a configuration file is one", path)
		}
		section := json.RawMessage("null")
		for k, v := range whole {
			if strings.EqualFold(k, "ReverseProxy") { // as ASP.NET reads keys
				section = v
			}
		}
		lines, err := prettyLines(json.RawMessage(`{"ReverseProxy":` + string(section) + `}`))
		return diffSide{name: arg, lines: lines}, err
	}
	n, err := versionArg(arg)
	if err != nil {
		return diffSide{}, err
	}
	if n == 0 {
		return diffSide{name: "version 0 (nothing pushed)"}, nil
	}
	c, ctx, cancel, err := cf.client(cmd)
	if err != nil {
		return diffSide{}, err
	}
	defer cancel()
	v, err := c.ConfigAt(ctx, n)
	if err != nil {
		return diffSide{}, explain(err)
	}
	lines, err := prettyLines(v.Config)
	if err != nil {
		return diffSide{}, fmt.Errorf("version %d: %w", n, err)
	}
	return diffSide{name: fmt.Sprintf("version %d (%s)", n, v.Time.UTC().Format(tableTime)), lines: lines}, nil
}

// versionArg reads a version number argument.
func versionArg(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, usageError{fmt.Errorf("%q is not a version: give a number (tether config history lists them) or file:PATH", s)}
	}
	return n, nil
}

// prettyLines prints a configuration as JSON with sorted keys, two
// spaces a level: the same content always prints the same, so a diff
// shows only what changed.
func prettyLines(raw json.RawMessage) ([]string, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("the configuration is not JSON: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(buf.String(), "\n"), "\n"), nil
}

// printJSON writes v as indented JSON (--json).
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// readPushFile reads the file a push sends (- is stdin) and returns it as
// plain JSON: a YAML file (.yaml, .yml) converted, comments and trailing
// commas (allowed as in appsettings.json) taken out. A file that does not
// parse is refused here, at its line and column, before anything is sent.
func readPushFile(stdin io.Reader, path string) ([]byte, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading stdin: %w", err)
		}
	} else if data, err = readFile("", path, "a configuration file (JSON or YAML)"); err != nil {
		return nil, err
	}
	name := path
	if path == "-" {
		name = "stdin"
	}
	format := "json"
	if ext := strings.ToLower(filepath.Ext(path)); ext == ".yaml" || ext == ".yml" {
		format = "yaml"
	}
	if _, err := tree.Parse(data, format); err != nil {
		var se *tree.SyntaxError
		if errors.As(err, &se) {
			return nil, errors.New(se.In(name))
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if format == "yaml" {
		var v any
		if err := yaml.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		b, err := json.Marshal(jsonable(v))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return b, nil
	}
	b, err := hujson.Standardize(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return b, nil
}

// jsonable turns YAML's maps with non-string keys (a number as a key)
// into JSON objects.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonable(e)
		}
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = jsonable(e)
		}
	}
	return v
}
