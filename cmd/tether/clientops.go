package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// token is the admin bearer token: --token-file's content, else
// TETHER_ADMIN_TOKEN.
func (cf *clientFlags) token() (string, error) {
	if cf.tokenFile == "" {
		return os.Getenv("TETHER_ADMIN_TOKEN"), nil
	}
	b, err := readFile("--token-file", cf.tokenFile, "the admin API's bearer token (the agent's --admin-token-file)")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// explain adds what to do to the admin API's errors a user can fix.
func explain(err error) error {
	if err == nil {
		return nil
	}
	if strings.HasSuffix(err.Error(), "(HTTP 401)") {
		return fmt.Errorf("%w: the admin token comes from TETHER_ADMIN_TOKEN or --token-file (the agent's --admin-token-file)", err)
	}
	return err
}

// joinHint explains memberlist's answer when a join address is not a
// gossip port: an admin or proxy port answers HTTP, which memberlist reads
// as an unencrypted state exchange; a Raft port drops the connection.
func joinHint(err error, addrs []string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "gossip addresses") || strings.Contains(msg, "another cluster secret") || strings.Contains(msg, "Raft port"):
		return err // the node said it already
	case strings.Contains(msg, "remote state is not encrypted") || strings.Contains(msg, "Unsupported message type") ||
		strings.Contains(msg, "malformed HTTP response") || strings.Contains(msg, "unexpected message type"):
		return fmt.Errorf("%v: this looks like another service (an admin or proxy port?): --join and tether join take gossip addresses, HOST[:PORT] of a node's --gossip-addr (default port 7946)", err)
	case strings.Contains(msg, "connection reset by peer") || strings.Contains(msg, ": EOF"):
		// A node of an older version does not say it: a Raft port takes
		// the connection and drops it.
		return fmt.Errorf("%v: %s took the connection and closed it: is it a node's Raft port (--raft-addr, default 7000)? --join and tether join take the gossip address, a node's --gossip-addr (default port 7946)", err, strings.Join(addrs, ", "))
	case strings.Contains(strings.ToLower(msg), "no installed keys could decrypt"):
		return fmt.Errorf("%v: the node at %s has another cluster secret", err, strings.Join(addrs, ", "))
	}
	return err
}

// noSuchCluster turns an error about cluster id into "there is no cluster
// id", listing the clusters, when the node has no such cluster.
func (cf *clientFlags) noSuchCluster(cmd *cobra.Command, id string, err error) error {
	if err == nil || !strings.HasSuffix(err.Error(), "(HTTP 404)") {
		return err
	}
	c, ctx, cancel, cerr := cf.client(cmd)
	if cerr != nil {
		return err
	}
	defer cancel()
	v, cerr := c.Do(ctx, http.MethodGet, "/v1/clusters", nil)
	if cerr != nil {
		return err
	}
	list, _ := v.(map[string]any)["clusters"].([]any)
	var ids []string
	for _, x := range list {
		if s, ok := x.(string); ok {
			ids = append(ids, s)
		}
	}
	if slices.Contains(ids, id) {
		return err
	}
	if len(ids) == 0 {
		return fmt.Errorf("there is no cluster %q: the node's configuration has no clusters", id)
	}
	if near := nearest(id, ids); len(near) > 0 {
		return fmt.Errorf("there is no cluster %q; did you mean %s? (the clusters are: %s)", id, orList(near), strings.Join(ids, ", "))
	}
	return fmt.Errorf("there is no cluster %q; the clusters are: %s", id, strings.Join(ids, ", "))
}

// nearest are the names within a typo's distance of typed (two edits,
// case aside), nearest first.
func nearest(typed string, names []string) []string {
	const typo = 2
	best := typo + 1
	var out []string
	for _, n := range names {
		d := editDistance(strings.ToLower(typed), strings.ToLower(n))
		switch {
		case d < best:
			best, out = d, []string{n}
		case d == best && d <= typo:
			out = append(out, n)
		}
	}
	return out
}

// keyringListCmd lists keys; an installed key shows what its activation
// waits for instead of the far-off placeholder time it carries until the
// leader activates it.
func keyringListCmd() *cobra.Command {
	return clientCmd("list", "List keys (never key material); an installed key shows what its activation waits for", cobra.NoArgs,
		func(cf *clientFlags, cmd *cobra.Command, _ []string) error {
			c, ctx, cancel, err := cf.client(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			v, err := c.Do(ctx, http.MethodGet, "/v1/keyring", nil)
			if err != nil {
				return explain(err)
			}
			if cf.asJSON {
				return cf.print(v, "")
			}
			keys, _ := v.(map[string]any)["keys"].([]any)
			for _, k := range keys {
				m, ok := k.(map[string]any)
				if !ok || m["state"] != "installed" {
					continue
				}
				if p, ok := m["pending"].(string); ok && p != "" {
					m["activates"] = p
				}
			}
			return cf.print(v, "keys", "id", "state", "created", "activates", "expires")
		})
}

// keyringRevokeCmd revokes a key after the user confirms (or --yes):
// every session sealed with it starts over.
func keyringRevokeCmd() *cobra.Command {
	var yes bool
	c := clientCmd("revoke KEY_ID", "Revoke a key: values sealed with it stop decrypting at once (asks first unless --yes)", cobra.ExactArgs(1),
		func(cf *clientFlags, cmd *cobra.Command, args []string) error {
			if !yes {
				if err := confirm(cmd.InOrStdin(), cmd.ErrOrStderr(), fmt.Sprintf(
					"Revoke key %s? Every value sealed with it stops decrypting at once: its sessions start over. [y/N] ", args[0])); err != nil {
					return err
				}
			}
			return cf.call(cmd, http.MethodPost, "/v1/keyring/"+url.PathEscape(args[0])+"/revoke", nil, "")
		})
	c.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return c
}

// confirm asks question on w and reads a yes from r; anything else, or no
// answer (stdin closed, not a terminal), refuses.
func confirm(r io.Reader, w io.Writer, question string) error {
	fmt.Fprint(w, question)
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	case "":
		if errors.Is(err, io.EOF) {
			fmt.Fprintln(w)
			return errors.New("not confirmed (no answer on stdin): pass --yes to proceed without asking")
		}
	}
	return errors.New("not confirmed")
}
