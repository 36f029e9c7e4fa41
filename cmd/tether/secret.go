package main

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/spf13/cobra"
)

// secretCmd rotates the cluster secret, as Consul's keyring does for
// gossip: install the new secret on every node, use it, remove the old one.
// FILE is a secret file as --cluster-secret-file takes (white space around
// it is ignored); its content goes to the node --admin names, which wraps
// it under the cluster's secret before anything leaves that node.
func secretCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "secret", Short: "Rotate the cluster secret without downtime: install, use, remove"}
	columns := []string{"id", "state", "held_by", "missing_on", "used_by"}
	list := clientCmd("list", "List the cluster's secrets by id (never the secrets), which nodes hold and use each", cobra.NoArgs,
		func(cf *clientFlags, cmd *cobra.Command, _ []string) error {
			c, ctx, cancel, err := cf.client(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			v, err := c.Do(ctx, http.MethodGet, "/v1/secrets", nil)
			if err != nil {
				return explain(err)
			}
			if m, ok := v.(map[string]any); ok && !cf.asJSON {
				delete(m, "node")
			}
			return cf.print(v, "secrets", columns...)
		})
	write := func(op, use, short string, done string) *cobra.Command {
		var force bool
		c := clientCmd(use, short, cobra.ExactArgs(1),
			func(cf *clientFlags, cmd *cobra.Command, args []string) error {
				b, err := readFile("secret "+op, args[0], "a cluster secret, as --cluster-secret-file holds (make one with: (umask 077; openssl rand -hex 32 > FILE))")
				if err != nil {
					return err
				}
				secret := strings.TrimSpace(string(b))
				if len(secret) < 16 {
					return fmt.Errorf("secret %s: %s holds %d bytes, a cluster secret has at least 16 (make one with: openssl rand -hex 32)", op, args[0], len(secret))
				}
				path := "/v1/secrets/" + op
				if force {
					path += "?force=true"
				}
				c, ctx, cancel, err := cf.client(cmd)
				if err != nil {
					return err
				}
				defer cancel()
				v, err := c.Do(ctx, http.MethodPost, path, map[string]string{"secret": secret})
				if err != nil {
					return explain(err)
				}
				if cf.asJSON {
					return cf.print(v, "")
				}
				m, _ := v.(map[string]any)
				id, _ := m["id"].(string)
				line := fmt.Sprintf("secret %s %s", id, done)
				if note, _ := m["note"].(string); note != "" {
					line += " (" + note + ")"
				}
				fmt.Println(line)
				delete(m, "id")
				delete(m, "note")
				return cf.print(m, "secrets", columns...)
			})
		if op == "remove" {
			c.Flags().BoolVar(&force, "force", false, "remove it even while Raft servers are down (each then needs the new secret in its --cluster-secret-file)")
		}
		return c
	}
	cmd.AddCommand(
		list,
		write("install", "install FILE", "Install FILE's secret on every node: accepted from peers, not used yet", "installed"),
		write("use", "use FILE", "Make FILE's secret the one every node encrypts and proves with (once every node holds it)", "in use"),
		write("remove", "remove FILE", "Remove FILE's secret: nothing made with it is accepted any more (once no node uses it)", "removed"),
	)
	return cmd
}
