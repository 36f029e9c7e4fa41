package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/tether-proxy/tether/node"
)

// clientFlags are shared by every command that talks to the admin API.
type clientFlags struct {
	admin   string
	asJSON  bool
	timeout time.Duration
}

func (cf *clientFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&cf.admin, "admin", "http://"+node.DefaultAdminAddr, "admin API URL (env TETHER_ADMIN)")
	cmd.Flags().BoolVar(&cf.asJSON, "json", false, "print the API's JSON answer")
	cmd.Flags().DurationVar(&cf.timeout, "timeout", 30*time.Second, "give up after this long")
}

// call sends one admin request and prints its answer as JSON or a table.
func (cf *clientFlags) call(cmd *cobra.Command, method, path string, body any, listKey string, columns ...string) error {
	if err := bindEnv(cmd); err != nil {
		return err
	}
	c := node.Client{Base: cf.admin, Token: os.Getenv("TETHER_ADMIN_TOKEN"), HTTP: &http.Client{Timeout: cf.timeout}}
	ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
	defer cancel()
	v, err := c.Do(ctx, method, path, body)
	if err != nil {
		return err
	}
	if cf.asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	return node.WriteTable(os.Stdout, v, listKey, columns...)
}

func clientCmds() []*cobra.Command {
	status := &cobra.Command{Use: "status", Short: "Show the node's status", Args: cobra.NoArgs}
	var statusF clientFlags
	statusF.register(status)
	status.RunE = func(cmd *cobra.Command, _ []string) error {
		return statusF.call(cmd, http.MethodGet, "/v1/status", nil, "")
	}

	keyringCmd := &cobra.Command{Use: "keyring", Short: "List, rotate and revoke affinity keys"}
	list := &cobra.Command{Use: "list", Short: "List keys (never key material)", Args: cobra.NoArgs}
	var listF clientFlags
	listF.register(list)
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		return listF.call(cmd, http.MethodGet, "/v1/keyring", nil, "keys", "id", "state", "created", "activates", "expires")
	}
	rotate := &cobra.Command{Use: "rotate", Short: "Create a new key; it becomes active once installed", Args: cobra.NoArgs}
	var rotateF clientFlags
	rotateF.register(rotate)
	rotate.RunE = func(cmd *cobra.Command, _ []string) error {
		return rotateF.call(cmd, http.MethodPost, "/v1/keyring/rotate", nil, "")
	}
	revoke := &cobra.Command{Use: "revoke KEY_ID", Short: "Revoke a key: values sealed with it stop decrypting at once", Args: cobra.ExactArgs(1)}
	var revokeF clientFlags
	revokeF.register(revoke)
	revoke.RunE = func(cmd *cobra.Command, args []string) error {
		return revokeF.call(cmd, http.MethodPost, "/v1/keyring/"+url.PathEscape(args[0])+"/revoke", nil, "")
	}
	keyringCmd.AddCommand(list, rotate, revoke)

	dests := &cobra.Command{Use: "destinations [CLUSTER]", Short: "Show destinations with health and drain state", Args: cobra.MaximumNArgs(1)}
	var destsF clientFlags
	destsF.register(dests)
	dests.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return destsF.call(cmd, http.MethodGet, "/v1/clusters", nil, "")
		}
		return destsF.call(cmd, http.MethodGet, "/v1/clusters/"+url.PathEscape(args[0])+"/destinations", nil,
			"destinations", "id", "address", "health.local", "health.cluster", "health.passive", "draining", "inflight")
	}

	drain := &cobra.Command{Use: "drain CLUSTER DEST_ID", Short: "Drain a destination (no new sessions), or --undo", Args: cobra.ExactArgs(2)}
	var drainF clientFlags
	var undo bool
	drainF.register(drain)
	drain.Flags().BoolVar(&undo, "undo", false, "stop draining")
	drain.RunE = func(cmd *cobra.Command, args []string) error {
		method := http.MethodPost
		if undo {
			method = http.MethodDelete
		}
		return drainF.call(cmd, method, "/v1/clusters/"+url.PathEscape(args[0])+"/destinations/"+url.PathEscape(args[1])+"/drain", nil, "")
	}
	return []*cobra.Command{status, keyringCmd, dests, drain}
}
