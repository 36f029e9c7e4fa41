package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tether-proxy/tether/internal/atomicfile"
	"github.com/tether-proxy/tether/node"
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
			var info struct {
				ClusterID string `json:"cluster_id"`
				Node      string `json:"node"`
				Index     uint64 `json:"index"`
				Keys      int    `json:"keys"`
				Drains    int    `json:"drains"`
			}
			if err := json.Unmarshal(b, &info); err != nil {
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
			var res struct {
				Restored struct {
					ClusterID string `json:"cluster_id"`
					Keys      int    `json:"keys"`
					Drains    int    `json:"drains"`
				} `json:"restored"`
				Active string `json:"active_key_id"`
			}
			json.Unmarshal(out, &res)
			fmt.Printf("restored %s (saved from cluster %s): %s, %s; active key %s\n",
				args[0], res.Restored.ClusterID, plural(res.Restored.Keys, "key"), plural(res.Restored.Drains, "drain"), res.Active)
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
	base := strings.TrimRight(c.Base, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, node.AdminUnreachable(base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, node.AdminUnreachable(base, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return nil, explain(fmt.Errorf("%s (HTTP %d)", e.Error, resp.StatusCode))
		}
		return nil, explain(fmt.Errorf("admin API answered %s (HTTP %d)", resp.Status, resp.StatusCode))
	}
	return b, nil
}
