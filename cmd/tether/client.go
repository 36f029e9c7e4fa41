package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/tether-proxy/tether/node/apiclient"
)

// clientFlags are shared by every command that talks to the admin API.
type clientFlags struct {
	admin     string
	tokenFile string
	asJSON    bool
	timeout   time.Duration
}

func (cf *clientFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&cf.admin, "admin", "http://"+apiclient.DefaultAddr, "admin API URL (env TETHER_ADMIN)")
	cmd.Flags().BoolVar(&cf.asJSON, "json", false, "print the API's JSON answer")
	cmd.Flags().DurationVar(&cf.timeout, "timeout", 30*time.Second, "give up after this long")
	cmd.Flags().StringVar(&cf.tokenFile, "token-file", "", "file holding the admin API bearer token (default: env TETHER_ADMIN_TOKEN)")
}

// client is the admin API client and the deadline of one command.
func (cf *clientFlags) client(cmd *cobra.Command) (apiclient.Client, context.Context, context.CancelFunc, error) {
	if err := bindEnv(cmd); err != nil {
		return apiclient.Client{}, nil, nil, err
	}
	token, err := cf.token()
	if err != nil {
		return apiclient.Client{}, nil, nil, err
	}
	c := apiclient.Client{Base: cf.admin, Token: token, HTTP: &http.Client{Timeout: cf.timeout}}
	ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
	return c, ctx, cancel, nil
}

// print writes an answer as JSON (--json) or as a table.
func (cf *clientFlags) print(v any, listKey string, columns ...string) error {
	if cf.asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	return writeTable(os.Stdout, v, listKey, columns...)
}

// call sends one admin request and prints its answer as JSON or a table.
func (cf *clientFlags) call(cmd *cobra.Command, method, path string, body any, listKey string, columns ...string) error {
	c, ctx, cancel, err := cf.client(cmd)
	if err != nil {
		return err
	}
	defer cancel()
	v, err := c.Do(ctx, method, path, body)
	if err != nil {
		return explain(err)
	}
	return cf.print(v, listKey, columns...)
}

// clientCmd is one client command with the shared flags.
func clientCmd(use, short string, args cobra.PositionalArgs, run func(cf *clientFlags, cmd *cobra.Command, args []string) error) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Args: args}
	cf := &clientFlags{}
	cf.register(c)
	c.RunE = func(cmd *cobra.Command, a []string) error { return run(cf, cmd, a) }
	return c
}

// getCmd is a command that GETs path and prints it.
func getCmd(use, short, path, listKey string, columns ...string) *cobra.Command {
	return clientCmd(use, short, cobra.NoArgs, func(cf *clientFlags, cmd *cobra.Command, _ []string) error {
		return cf.call(cmd, http.MethodGet, path, nil, listKey, columns...)
	})
}

func clientCmds() []*cobra.Command {
	status := getCmd("status", "Show the node's status", "/v1/status", "")
	members := getCmd("members", "List the cluster's nodes with gossip state and Raft role", "/v1/members",
		"members", "id", "address", "admin_address", "state", "raft", "leader", "version", "durable_index", "config_version", "config_error")
	join := clientCmd("join HOST[:PORT]...", "Make the node join the nodes at these addresses", cobra.MinimumNArgs(1),
		func(cf *clientFlags, cmd *cobra.Command, args []string) error {
			return joinHint(cf.call(cmd, http.MethodPost, "/v1/join", map[string]any{"addresses": args}, ""), args)
		})
	var force bool
	leave := clientCmd("leave", "Make the node leave the cluster gracefully (it then stops); succeeds only once it is out of Raft", cobra.NoArgs,
		func(cf *clientFlags, cmd *cobra.Command, _ []string) error {
			return cf.call(cmd, http.MethodPost, "/v1/leave?force="+strconv.FormatBool(force), nil, "")
		})
	leave.Flags().BoolVar(&force, "force", false, "leave even below --bootstrap-expect voters or a quorum of alive voters")
	remove := clientCmd("remove NODE_ID", "Remove a failed node from the cluster", cobra.ExactArgs(1),
		func(cf *clientFlags, cmd *cobra.Command, args []string) error {
			return cf.call(cmd, http.MethodDelete, "/v1/members/"+url.PathEscape(args[0]), nil, "")
		})

	keyringCmd := &cobra.Command{Use: "keyring", Short: "List, rotate and revoke affinity keys"}
	keyringCmd.AddCommand(
		keyringListCmd(),
		clientCmd("rotate", "Create a new key; it becomes active once every node holds it", cobra.NoArgs,
			func(cf *clientFlags, cmd *cobra.Command, _ []string) error {
				return cf.call(cmd, http.MethodPost, "/v1/keyring/rotate", nil, "")
			}),
		keyringRevokeCmd(),
	)

	dests := clientCmd("destinations [CLUSTER]", "Show destinations with health and drain state (every cluster's when none is named)", cobra.MaximumNArgs(1),
		func(cf *clientFlags, cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				return cf.noSuchCluster(cmd, args[0], cf.clusterDestinations(cmd, args[0]))
			}
			return cf.allDestinations(cmd)
		})

	var undo bool
	drain := clientCmd("drain CLUSTER DEST_ID", "Drain a destination (no new sessions), or --undo", cobra.ExactArgs(2),
		func(cf *clientFlags, cmd *cobra.Command, args []string) error {
			method := http.MethodPost
			if undo {
				method = http.MethodDelete
			}
			c, ctx, cancel, err := cf.client(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			v, err := c.Do(ctx, method, "/v1/clusters/"+url.PathEscape(args[0])+"/destinations/"+url.PathEscape(args[1])+"/drain", nil)
			if err != nil {
				return cf.noSuchCluster(cmd, args[0], explain(err))
			}
			if err := cf.print(v, ""); err != nil {
				return err
			}
			// Committed, but a live node did not apply it within the
			// wait: a script must not take the destination down yet.
			if m, ok := v.(map[string]any); ok {
				if w, _ := m["warning"].(string); w != "" {
					return errors.New(w)
				}
			}
			return nil
		})
	drain.Flags().BoolVar(&undo, "undo", false, "stop draining")
	return []*cobra.Command{status, members, join, leave, remove, keyringCmd, dests, drain, snapshotCmd(), secretCmd()}
}

var destColumns = []string{"cluster", "id", "address", "health.local", "health.cluster", "probers", "drain_state", "drain_deadline", "drained_since", "inflight"}

// clusterDestinations lists one cluster's destinations: the table names
// the cluster on every row, as the table of every cluster does, and this
// node's affinity outcomes in words.
func (cf *clientFlags) clusterDestinations(cmd *cobra.Command, id string) error {
	c, ctx, cancel, err := cf.client(cmd)
	if err != nil {
		return err
	}
	defer cancel()
	v, err := c.Do(ctx, http.MethodGet, "/v1/clusters/"+url.PathEscape(id)+"/destinations", nil)
	if err != nil {
		return explain(err)
	}
	if cf.asJSON {
		return cf.print(v, "")
	}
	m, _ := v.(map[string]any)
	rows, _ := m["destinations"].([]any)
	for _, r := range rows {
		if d, ok := r.(map[string]any); ok {
			d["cluster"] = id
		}
	}
	table := map[string]any{"destinations": rows}
	if a, ok := m["affinity"].(map[string]any); ok {
		table["affinity"] = affinityWords(a)
	}
	return cf.print(table, "destinations", destColumns...)
}

// affinityWords says what this node's affinity outcomes for a cluster
// were: kept sessions, new ones, and broken ones (an invalid value or an
// unavailable destination) redistributed or refused by FailurePolicy.
func affinityWords(a map[string]any) string {
	n := func(k string) int {
		f, _ := a[k].(float64)
		return int(f)
	}
	return fmt.Sprintf("this node's requests since it started: %d by their session, %d without a session, %d redistributed and %d refused (503) for a broken session",
		n("routed"), n("no_session"), n("failed_open"), n("failed_closed"))
}

// plural is "1 route", "2 routes".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// allDestinations lists the destinations of every cluster in one table.
func (cf *clientFlags) allDestinations(cmd *cobra.Command) error {
	c, ctx, cancel, err := cf.client(cmd)
	if err != nil {
		return err
	}
	defer cancel()
	v, err := c.Do(ctx, http.MethodGet, "/v1/clusters", nil)
	if err != nil {
		return explain(err)
	}
	ids, _ := v.(map[string]any)["clusters"].([]any)
	all := []any{}
	byCluster := map[string]any{}
	for _, id := range ids {
		s, _ := id.(string)
		d, err := c.Do(ctx, http.MethodGet, "/v1/clusters/"+url.PathEscape(s)+"/destinations", nil)
		if err != nil {
			return explain(err)
		}
		byCluster[s] = d
		rows, _ := d.(map[string]any)["destinations"].([]any)
		for _, r := range rows {
			if m, ok := r.(map[string]any); ok {
				m["cluster"] = s
				all = append(all, m)
			}
		}
	}
	if cf.asJSON {
		return cf.print(map[string]any{"clusters": byCluster}, "")
	}
	return cf.print(map[string]any{"destinations": all}, "destinations", destColumns...)
}
