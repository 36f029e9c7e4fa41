package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tether-proxy/tether/node/apiclient"
)

// healthCmd is the container health check: a scratch image has no curl, so
// the binary asks its own admin API. It exits 0 when the node is ready
// (/readyz: the proxy listeners are open, a leader is known and a key is
// active), 1 otherwise.
func healthCmd() *cobra.Command {
	var admin string
	var timeout time.Duration
	var live bool
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Exit 0 if the local node is ready (GET /readyz), 1 if not (for container health checks)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bindEnv(cmd); err != nil {
				return err
			}
			path := "/readyz"
			if live {
				path = "/healthz"
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return checkHealth(ctx, strings.TrimSuffix(admin, "/"), path)
		},
	}
	cmd.Flags().StringVar(&admin, "admin", "http://"+apiclient.DefaultAddr, "admin API URL (env TETHER_ADMIN)")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "give up after this long")
	cmd.Flags().BoolVar(&live, "live", false, "check only that the process answers (GET /healthz), not readiness")
	return cmd
}

func checkHealth(ctx context.Context, base, path string) error {
	c := apiclient.Client{Base: base, HTTP: http.DefaultClient}
	if err := c.Check(ctx, path); err != nil {
		return fmt.Errorf("health: %w", err)
	}
	fmt.Println("ok")
	return nil
}
