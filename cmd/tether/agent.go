package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tether-proxy/tether/internal/gcfloor"
	"github.com/tether-proxy/tether/internal/logging"
	"github.com/tether-proxy/tether/node"
	"github.com/tether-proxy/tether/proxy"
	"github.com/tether-proxy/tether/proxy/accesslog"
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/frontdoor"
)

func agentCmd() *cobra.Command {
	var cfg node.Config
	var logLevel, logFormat string
	var noAccessLog bool
	cmd := &cobra.Command{
		Use:   "agent --config FILE",
		Short: "Run a tether node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bindEnv(cmd); err != nil {
				return err
			}
			if err := checkAgentFiles(cfg); err != nil {
				return err
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)
			}
			logger, err := logging.New(os.Stderr, logFormat, level)
			if err != nil {
				return fmt.Errorf("--log-format: %w", err)
			}
			cfg.Logger = logger
			warnReadableSecrets(logger, map[string]string{"--cluster-secret-file": cfg.ClusterSecretFile, "--admin-token-file": cfg.AdminTokenFile})
			if !noAccessLog {
				// Batched: a request does not pay a write(2) of its
				// own; runAgent returns after the node has shut down
				// (every request logged), then Close writes the rest.
				al := accesslog.New(os.Stdout)
				defer al.Close()
				cfg.AccessLog = al.Logger()
			}
			cfg.WatchConfig = true
			return runAgent(cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.ConfigPath, "config", "", "proxy configuration file (JSON or YAML)")
	f.StringVar(&cfg.NodeID, "node-id", "", "node id (default: the host name)")
	f.StringVar(&cfg.DataDir, "data-dir", "", "data directory (default: $XDG_STATE_HOME/tether/<node-id>, /var/lib/tether/<node-id> for root, else ~/.local/state/tether/<node-id>)")
	f.StringVar(&cfg.AdminAddr, "admin-addr", node.DefaultAdminAddr, "admin API address")
	f.StringVar(&cfg.ClusterSecretFile, "cluster-secret-file", "", "file holding the cluster secret, the same on every node: it encrypts gossip, authenticates and encrypts Raft connections, and wraps keys at rest (make one with: openssl rand -hex 32)")
	f.StringVar(&cfg.AdminTokenFile, "admin-token-file", "", "file holding the admin API bearer token")
	f.StringVar(&cfg.RaftAddr, "raft-addr", node.DefaultRaftAddr, "Raft listen address")
	f.StringVar(&cfg.GossipAddr, "gossip-addr", node.DefaultGossipAddr, "gossip (memberlist) listen address")
	f.StringVar(&cfg.Advertise, "advertise", "", "host other nodes reach this one at (NAT, containers); default: the bound or a private IP")
	f.StringSliceVar(&cfg.Join, "join", nil, "HOST[:PORT] of nodes to join (repeatable; a DNS name joins every address behind it)")
	f.StringSliceVar(&cfg.Listen, "listen", nil, "proxy listen address (host:port, :port or an http/https URL; repeatable): replaces the config file's listeners, for several nodes on one host")
	f.IntVar(&cfg.BootstrapExpect, "bootstrap-expect", 0, "form a new cluster once this many nodes without state see each other")
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "certificate for mutual TLS between nodes (with --tls-key and --tls-ca)")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "private key for --tls-cert")
	f.StringVar(&cfg.TLSCA, "tls-ca", "", "CA bundle that signs every node's certificate")
	f.DurationVar(&cfg.ReapTimeout, "reap-timeout", node.DefaultReapTimeout, "remove a failed node from Raft after this long")
	f.DurationVar(&cfg.VoterGrace, "voter-grace", node.DefaultVoterGrace, "replace a failed voter only after it has been failed this long")
	f.IntVar(&cfg.RaftVoters, "raft-voters", node.DefaultRaftVoters, "at most this many voters (odd); further nodes are non-voters")
	f.StringVar(&cfg.RaftHandshakeV1, "raft-handshake-v1", node.HandshakeV1Auto, "Raft handshake version 1 (peers of releases before the cluster id check): auto (accepted until every member speaks version 2) or refuse")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&logFormat, "log-format", logging.FormatAuto, "log format: auto (text when stderr is a terminal, else json), json (one object a line, for log pipelines) or text (key=value lines, for a person)")
	f.BoolVar(&noAccessLog, "no-access-log", false, "do not write the JSON access log to stdout")
	f.StringVar(&cfg.HTTP1Server, "http1-server", string(frontdoor.HTTP1Own), "what serves HTTP/1.1, cleartext and over TLS: own (tether's loop) or stdlib (Go's net/http)")
	f.StringVar(&cfg.HTTP2Server, "http2-server", string(frontdoor.HTTP2Own), "what serves HTTP/2, h2 over TLS and h2c: own (tether's server) or stdlib (Go's net/http)")
	f.StringVar(&cfg.WriteYield, "write-yield", string(frontdoor.WriteYieldAuto), "a socket write first lets other ready requests write: auto (on one CPU only), on or off")
	f.BoolVar(&cfg.Strict, "strict", false, "treat unknown config keys as errors, not warnings (for CI)")
	f.BoolVar(&cfg.ServeBeforeJoin, "serve-before-join", false, "with --join or --bootstrap-expect and no state of its own, open the proxy listeners at start instead of once this node is in the cluster and holds the active key")
	return cmd
}

func runAgent(cfg node.Config) error {
	n, err := node.New(cfg)
	if err != nil {
		return err
	}
	gcCtx, stopGC := context.WithCancel(context.Background())
	defer stopGC()
	gcfloor.Tune(gcCtx)
	// Listen before starting, so a signal during start-up is not fatal; a
	// SIGHUP then reloads once the node is up.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	if err := n.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return fmt.Errorf("node %s did not start", n.ID())
	}
wait:
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				_ = n.Reload() // logs its own outcome
				continue
			}
			break wait
		case <-n.Done():
			// It left the cluster (tether leave) or cannot go on.
			break wait
		}
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
	if err := n.Shutdown(ctx); err != nil {
		return err
	}
	return n.Err()
}

// checkAgentFiles refuses, before the node starts, a file flag whose file
// cannot be read, naming the flag and what the file should hold. A flag
// not given is left to the node (--config is required, the others are
// optional).
func checkAgentFiles(cfg node.Config) error {
	for _, f := range []struct{ flag, path, what string }{
		{"--config", cfg.ConfigPath, "the proxy configuration (JSON or YAML)"},
		{"--cluster-secret-file", cfg.ClusterSecretFile, "the cluster secret, the same file on every node (make one with: (umask 077; openssl rand -hex 32 > FILE))"},
		{"--admin-token-file", cfg.AdminTokenFile, "the admin API's bearer token"},
		{"--tls-cert", cfg.TLSCert, "this node's PEM certificate for mutual TLS between nodes"},
		{"--tls-key", cfg.TLSKey, "the PEM private key of --tls-cert"},
		{"--tls-ca", cfg.TLSCA, "the PEM CA bundle that signs every node's certificate"},
	} {
		if f.path == "" {
			continue
		}
		if err := checkFile(f.flag, f.path, f.what); err != nil {
			return err
		}
	}
	return nil
}

// warnReadableSecrets warns about secret files that group or others may
// read: `openssl rand -hex 32 > file` creates one mode 0644.
func warnReadableSecrets(log *slog.Logger, files map[string]string) {
	for _, flag := range slices.Sorted(maps.Keys(files)) {
		path := files[flag]
		if path == "" {
			continue
		}
		fi, err := os.Stat(path)
		if err != nil {
			continue // the node reports a missing file when it reads it
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			log.Warn("secret file is readable by group or others: chmod 600 it", "flag", flag, "file", path, "mode", fmt.Sprintf("%04o", perm))
		}
	}
}

func configCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Check configuration files; push, show, list, compare and roll back the cluster's configuration"}
	var strict bool
	validate := &cobra.Command{
		Use:   "validate [--strict] FILE",
		Short: "Check a configuration file and list every error with its JSON path",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := bindEnv(cmd); err != nil {
				return err
			}
			if err := checkFile("", args[0], "a configuration file (JSON or YAML)"); err != nil {
				return err // not "is not valid": there is no file to judge
			}
			cfg, warnings, err := config.LoadWith(args[0], config.LoadOptions{Strict: strict, Info: func(m string) { fmt.Fprintln(os.Stderr, "info: "+m) }})
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
			if len(cfg.ReverseProxy.Routes) == 0 {
				fmt.Printf("%s is valid but serves nothing: it has no routes (ReverseProxy.Routes), so every request gets 404\n", args[0])
				return nil
			}
			fmt.Printf("%s is valid: %s, %s\n", args[0], plural(len(cfg.ReverseProxy.Routes), "route"), plural(len(cfg.ReverseProxy.Clusters), "cluster"))
			return nil
		},
	}
	validate.Flags().BoolVar(&strict, "strict", false, "treat unknown keys as errors, not warnings (for CI)")
	cmd.AddCommand(validate)
	cmd.AddCommand(clusterConfigCmds()...)
	return cmd
}
