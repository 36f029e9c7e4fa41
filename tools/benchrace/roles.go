package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/internal/gcfloor"
	"github.com/tether-proxy/tether/proxy"
	"github.com/tether-proxy/tether/proxy/accesslog"
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/frontdoor"
)

// bodySize is the response size a backend sends for a path: its last
// segment "64k" is 64 KiB, anything else 1 KiB.
func bodySize(path string) int {
	if strings.HasSuffix(path, "/64k") {
		return 64 << 10
	}
	return 1 << 10
}

// runBackend serves fixed bodies on n loopback listeners and prints their
// addresses, one line, comma-separated. It runs until stdin closes.
func runBackend(args []string) error {
	fs := flag.NewFlagSet("backend", flag.ExitOnError)
	n := fs.Int("n", 3, "listeners")
	kind := fs.String("kind", "nethttp", "nethttp (net/http's server) or raw (backend.go)")
	fs.Parse(args)
	if *kind != "nethttp" && *kind != "raw" {
		return fmt.Errorf("backend: -kind %q is neither nethttp nor raw", *kind)
	}
	if *kind == "raw" {
		startRawDate()
	}
	small, large := backendBodies()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := small
		if bodySize(r.URL.Path) == len(large) {
			b = large
		}
		// What a real server adds (Kestrel sends Date and Server; net/http
		// sends Date).
		w.Header().Set("Server", "Kestrel")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	})
	var addrs []string
	for range *n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		addrs = append(addrs, ln.Addr().String())
		if *kind == "raw" {
			go acceptRaw(ln, small, large)
			continue
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
		go srv.Serve(ln)
	}
	fmt.Println(strings.Join(addrs, ","))
	io.Copy(io.Discard, os.Stdin) // the harness holds stdin open
	return nil
}

// runFloor is the standard library's floor: httputil.ReverseProxy with a
// tuned transport and cookie stickiness (a "floor" cookie naming the
// backend's index; new sessions round-robin), X-Forwarded-* set. HTTP/1.1
// on the first address, h2c (prior knowledge) on the second, HTTPS (h2
// and http/1.1 by ALPN) on the third; paths under /n/ go to -nbackends.
func runFloor(args []string) error {
	fs := flag.NewFlagSet("floor", flag.ExitOnError)
	backends := fs.String("backends", "", "comma-separated host:port")
	nbackends := fs.String("nbackends", "", "comma-separated host:port of the paths under /n/")
	certFile := fs.String("cert", "", "certificate (PEM) of the HTTPS listener")
	keyFile := fs.String("key", "", "its key (PEM)")
	fs.Parse(args)
	var targets, ntargets []*url.URL
	for _, a := range strings.Split(*backends, ",") {
		targets = append(targets, &url.URL{Scheme: "http", Host: a})
	}
	for _, a := range strings.Split(*nbackends, ",") {
		if a != "" {
			ntargets = append(ntargets, &url.URL{Scheme: "http", Host: a})
		}
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	var next atomic.Uint64
	rp := &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			targets := targets
			if len(ntargets) > 0 && strings.HasPrefix(pr.In.URL.Path, "/n/") {
				targets = ntargets
			}
			i := -1
			if c, err := pr.In.Cookie("floor"); err == nil {
				if n, err := strconv.Atoi(c.Value); err == nil && n >= 0 && n < len(targets) {
					i = n
				}
			}
			if i < 0 {
				i = int(next.Add(1) % uint64(len(targets)))
				pr.Out.Header.Set("X-Floor-New", strconv.Itoa(i))
			}
			pr.SetURL(targets[i])
			pr.SetXForwarded()
		},
		ModifyResponse: func(resp *http.Response) error {
			if v := resp.Request.Header.Get("X-Floor-New"); v != "" {
				resp.Header.Add("Set-Cookie", "floor="+v+"; Path=/; HttpOnly")
			}
			return nil
		},
	}
	var lns []string
	for _, proto := range []string{"h1", "h2c", "tls"} {
		if proto == "tls" && *certFile == "" {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		lns = append(lns, ln.Addr().String())
		srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
		switch proto {
		case "h2c":
			srv.Protocols = new(http.Protocols)
			srv.Protocols.SetUnencryptedHTTP2(true)
		case "tls":
			go srv.ServeTLS(ln, *certFile, *keyFile)
			continue
		}
		go srv.Serve(ln)
	}
	fmt.Println(strings.Join(lns, ","))
	io.Copy(io.Discard, os.Stdin)
	return nil
}

// runProfile serves a tether config with the data path as `tether agent`
// builds it (proxy.New with a Prometheus registry and its batched JSON
// access log to a file, frontdoor.New, gcfloor.Tune), without the cluster, and writes a CPU profile
// from SIGUSR1 to SIGUSR2 (and its allocations to <o>.allocs), or a
// runtime trace when o ends in .trace: the harness profiles the request
// path under wrk with it.
func runProfile(args []string) error {
	fs := flag.NewFlagSet("profile", flag.ExitOnError)
	cfgPath := fs.String("config", "", "tether config")
	accessPath := fs.String("access-log", "", "access log file")
	out := fs.String("o", "cpu.pprof", "profile file")
	fs.Parse(args)
	gcCtx, stopGC := context.WithCancel(context.Background())
	defer stopGC()
	gcfloor.Tune(gcCtx) // as tether agent
	cfg, _, err := config.LoadWith(*cfgPath, config.LoadOptions{})
	if err != nil {
		return err
	}
	af, err := os.Create(*accessPath)
	if err != nil {
		return err
	}
	defer af.Close()
	al := accesslog.New(af) // as tether agent writes it
	defer al.Close()
	p, err := proxy.New(cfg, proxy.Options{
		AccessLog:  al.Logger(),
		Registerer: prometheus.NewRegistry(),
		NodeID:     "profile",
	})
	if err != nil {
		return err
	}
	srv, err := frontdoor.New(cfg, p, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	var addrs []string
	for _, a := range srv.Addrs() {
		addrs = append(addrs, a.String())
	}
	// Before the addresses go out: the harness signals as soon as it has
	// them, and an unheard SIGUSR1 is ignored (no profile at all).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	fmt.Println(strings.Join(addrs, ","))
	go func() {
		var f *os.File
		for s := range sigs {
			switch {
			case s == syscall.SIGUSR1 && f == nil:
				f, _ = os.Create(*out)
				if strings.HasSuffix(*out, ".trace") {
					trace.Start(f) // the scheduler's view: go tool trace -pprof=sched
				} else {
					pprof.StartCPUProfile(f)
				}
			case s == syscall.SIGUSR2 && f != nil:
				if strings.HasSuffix(*out, ".trace") {
					trace.Stop()
				} else {
					pprof.StopCPUProfile()
				}
				f.Close()
				f = nil
				// The runtime's default sampling (every 512 KiB) is
				// enough for counts per request and costs nothing the
				// CPU profile would show.
				if af, err := os.Create(*out + ".allocs"); err == nil {
					pprof.Lookup("allocs").WriteTo(af, 0)
					af.Close()
				}
				fmt.Println("profile written")
			}
		}
	}()
	bufio.NewReader(os.Stdin).ReadString(0) // until the harness closes stdin
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	p.Close()
	return nil
}
