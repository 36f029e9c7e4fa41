package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tether-proxy/tether/internal/atomicfile"
)

// snapshotCmd saves the cluster's replicated state (keyring, drains, ACME
// state) to one file and restores it, into the same cluster or another one
// with the same cluster secret.
func snapshotCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "Save the cluster's replicated state to a file, or restore it"}
	save := clientCmd("save FILE", "Save the keyring (wrapped with the cluster secret), drains and ACME state to FILE (- for stdout)", cobra.ExactArgs(1),
		func(cf *clientFlags, cmd *cobra.Command, args []string) error {
			b, err := cf.raw(cmd, http.MethodGet, "/v1/snapshot", nil)
			if err != nil {
				return err
			}
			// The node's own answer: what it saved (the file is
			// authenticated with the cluster secret, which this command
			// does not hold; a restore checks it).
			var file struct {
				Body []byte `json:"body"`
			}
			var info struct {
				ClusterID string `json:"cluster_id"`
				Node      string `json:"node"`
				Index     uint64 `json:"index"`
				Keys      int    `json:"keys"`
				Drains    int    `json:"drains"`
			}
			if err := json.Unmarshal(b, &file); err != nil {
				return fmt.Errorf("the admin API answered something that is not a snapshot: %v", err)
			}
			if err := json.Unmarshal(file.Body, &info); err != nil {
				return fmt.Errorf("the admin API answered something that is not a snapshot: %v", err)
			}
			if args[0] == "-" {
				_, err := os.Stdout.Write(b)
				return err
			}
			// 0600: the file holds wrapped key material.
			if err := atomicfile.WriteFile(args[0], b, 0o600); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "saved %s: cluster %s, %s, %s, from node %s at index %d\n",
				args[0], info.ClusterID, plural(info.Keys, "key"), plural(info.Drains, "drain"), info.Node, info.Index)
			return nil
		})
	var yes bool
	restore := clientCmd("restore FILE", "Replace the cluster's keyring, drains and ACME state with FILE's (asks first unless --yes)", cobra.ExactArgs(1),
		func(cf *clientFlags, cmd *cobra.Command, args []string) error {
			b, err := readFile("snapshot restore", args[0], "a file that tether snapshot save wrote")
			if err != nil {
				return err
			}
			if !yes {
				if err := confirm(cmd.InOrStdin(), cmd.ErrOrStderr(), fmt.Sprintf(
					"Replace the whole cluster's keyring, drains and ACME state with %s? Values sealed with keys not in the file stop opening. [y/N] ", args[0])); err != nil {
					return err
				}
			}
			out, err := cf.raw(cmd, http.MethodPost, "/v1/snapshot/restore", b)
			if err != nil {
				return err
			}
			if cf.asJSON {
				_, err := os.Stdout.Write(out)
				return err
			}
			// What the cluster decoded from the file (after checking it
			// is authenticated), not what the file claims.
			var res struct {
				Restored struct {
					ClusterID string    `json:"cluster_id"`
					Node      string    `json:"node"`
					Index     uint64    `json:"index"`
					Saved     time.Time `json:"saved"`
					Keys      int       `json:"keys"`
					Drains    int       `json:"drains"`
					Acme      int       `json:"acme_entries"`
				} `json:"restored"`
				KeptRevoked []string `json:"kept_revoked"`
				KeptKeys    []string `json:"kept_keys"`
				Active      string   `json:"active_key_id"`
			}
			if err := json.Unmarshal(out, &res); err != nil {
				return fmt.Errorf("the admin API answered something that is not a restore: %v", err)
			}
			rs := res.Restored
			fmt.Printf("restored %s (saved from cluster %s by node %s at index %d, %s): %s, %s, %s; active key %s\n",
				args[0], rs.ClusterID, rs.Node, rs.Index, rs.Saved.UTC().Format(time.RFC3339),
				plural(rs.Keys, "key"), plural(rs.Drains, "drain"), acmeEntries(rs.Acme), res.Active)
			if len(res.KeptRevoked) > 0 {
				fmt.Printf("kept revoked (revoked in the running cluster): %s\n", strings.Join(res.KeptRevoked, ", "))
			}
			if len(res.KeptKeys) > 0 {
				fmt.Printf("kept from the running cluster (the active key, which replaced a revoked one): %s\n", strings.Join(res.KeptKeys, ", "))
			}
			return nil
		})
	restore.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.AddCommand(save, restore)
	return cmd
}

// raw sends one admin request and returns the answer's body as it came;
// a non-2xx answer becomes an error with the API's "error" text.
func (cf *clientFlags) raw(cmd *cobra.Command, method, path string, body []byte) ([]byte, error) {
	c, ctx, cancel, err := cf.client(cmd)
	if err != nil {
		return nil, err
	}
	defer cancel()
	b, err := c.Raw(ctx, method, path, body)
	if err != nil {
		return nil, explain(err)
	}
	return b, nil
}

// acmeEntries is "1 ACME entry", "2 ACME entries".
func acmeEntries(n int) string {
	if n == 1 {
		return "1 ACME entry"
	}
	return fmt.Sprintf("%d ACME entries", n)
}
