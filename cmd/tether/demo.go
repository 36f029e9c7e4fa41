package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tether-proxy/tether/internal/gcfloor"
	"github.com/tether-proxy/tether/internal/logging"
	"github.com/tether-proxy/tether/node/demo"
)

func demoCmd() *cobra.Command {
	var nodes, backends int
	var verbose bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run three nodes and three demo backends on loopback until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelInfo
			}
			logger, _ := logging.New(os.Stderr, logging.FormatText, level)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			gcfloor.Tune(ctx)
			d, err := demo.Start(demo.Options{Nodes: nodes, Backends: backends, Logger: logger})
			if err != nil {
				return err
			}
			for _, l := range d.Lines() {
				fmt.Println(l)
			}
			fmt.Println("try: curl -si -c /tmp/tether.jar -b /tmp/tether.jar " + "http://" + d.Nodes[0].ProxyAddrs()[0].String() + "/ (repeat on any node: the session sticks)")
			fmt.Println("Ctrl-C stops the demo")
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = d.Stop(sctx)
			fmt.Println("demo stopped")
			return err
		},
	}
	cmd.Flags().IntVar(&nodes, "nodes", 3, "number of tether nodes")
	cmd.Flags().IntVar(&backends, "backends", 3, "number of demo backends")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "log at info level")
	return cmd
}
