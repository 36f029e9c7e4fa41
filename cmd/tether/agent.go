package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tether-proxy/tether/node"
	"github.com/tether-proxy/tether/proxy"
	"github.com/tether-proxy/tether/proxy/config"
)

func agentCmd() *cobra.Command {
	var cfg node.Config
	var logLevel string
	var noAccessLog bool
	cmd := &cobra.Command{
		Use:   "agent --config FILE",
		Short: "Run a tether node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bindEnv(cmd); err != nil {
				return err
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)
			}
			cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			if !noAccessLog {
				cfg.AccessLog = slog.New(slog.NewJSONHandler(os.Stdout, nil))
			}
			cfg.WatchConfig = true
			return runAgent(cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.ConfigPath, "config", "", "proxy configuration file (JSON or YAML)")
	f.StringVar(&cfg.NodeID, "node-id", "", "node id (default: the host name)")
	f.StringVar(&cfg.DataDir, "data-dir", "", "data directory (default: ./data/<node-id>)")
	f.StringVar(&cfg.AdminAddr, "admin-addr", node.DefaultAdminAddr, "admin API address")
	f.StringVar(&cfg.ClusterSecretFile, "cluster-secret-file", "", "file holding the cluster secret (encrypts the keyring at rest)")
	f.StringVar(&cfg.AdminTokenFile, "admin-token-file", "", "file holding the admin API bearer token")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.BoolVar(&noAccessLog, "no-access-log", false, "do not write the JSON access log to stdout")
	return cmd
}

func runAgent(cfg node.Config) error {
	n, err := node.New(cfg)
	if err != nil {
		return err
	}
	// Listen before starting, so a signal during start-up is not fatal; a
	// SIGHUP then reloads once the node is up.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	if err := n.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return fmt.Errorf("node %s did not start", n.ID())
	}
	for sig := range sigs {
		if sig == syscall.SIGHUP {
			_ = n.Reload() // logs its own outcome
			continue
		}
		break
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.ShutdownTimeout())
	defer cancel()
	go func() {
		// A second SIGINT or SIGTERM stops at once; a SIGHUP (a config tool
		// reloading during a rolling stop) changes nothing now.
		for sig := range sigs {
			if sig != syscall.SIGHUP {
				os.Exit(1)
			}
		}
	}()
	return n.Shutdown(ctx)
}

func configCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Work with configuration files"}
	cmd.AddCommand(&cobra.Command{
		Use:   "validate FILE",
		Short: "Check a configuration file and list every error with its JSON path",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, warnings, err := config.Load(args[0])
			for _, w := range warnings {
				fmt.Fprintln(os.Stderr, "warning: "+w)
			}
			if err == nil {
				if errs := proxy.Compile(cfg); len(errs) > 0 {
					err = errs
				}
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return fmt.Errorf("%s is not valid", args[0])
			}
			fmt.Printf("%s is valid: %d routes, %d clusters\n", args[0], len(cfg.ReverseProxy.Routes), len(cfg.ReverseProxy.Clusters))
			return nil
		},
	})
	return cmd
}
