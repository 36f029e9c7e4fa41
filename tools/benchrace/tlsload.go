package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

// The tlsload subcommand is the load of the handshake cases (tls-new,
// tls-resume): wrk reuses its connections and h2load has no mode with a
// connection per request, so neither measures what a handshake costs a
// proxy. Each of -c workers dials, shakes hands, sends one GET with
// Connection: close, reads the whole response and closes, over and over
// for -d. With -resume each worker offers the session ticket its previous
// connection received (its first, uncounted connection gets the first one) (TLS 1.3 PSK resumption, psk_dhe_ke as browsers);
// without, every handshake is a full one. Key exchange X25519 only: Go's
// client would also offer X25519MLKEM768, which a Go server picks and
// OpenSSL 3.0 cannot, and the race compares the proxies' cost of one
// handshake. It prints a tlsloadResult as JSON.

// tlsloadResult is a tlsload run's figures.
type tlsloadResult struct {
	loadResult
	Resumed int64 `json:"resumed"`
}

func runTLSLoad(args []string) error {
	fs := flag.NewFlagSet("tlsload", flag.ExitOnError)
	target := fs.String("url", "", "https URL")
	conns := fs.Int("c", 32, "workers, each with one connection at a time")
	dur := fs.Duration("d", 3*time.Second, "duration")
	resume := fs.Bool("resume", false, "resume each worker's previous session")
	var headers headerFlags
	fs.Var(&headers, "H", "request field (repeatable)")
	fs.Parse(args)
	res, err := tlsLoad(*target, *conns, *dur, *resume, headers)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

type headerFlags []string

func (h *headerFlags) String() string     { return fmt.Sprint(*h) }
func (h *headerFlags) Set(v string) error { *h = append(*h, v); return nil }

// tlsLoad runs the load and returns its figures; a run whose connections
// resumed less than nine times in ten with resume (or at all without it)
// measured the wrong handshake and is an error.
func tlsLoad(target string, conns int, dur time.Duration, resume bool, headers []string) (tlsloadResult, error) {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "https" {
		return tlsloadResult{}, fmt.Errorf("tlsload: %q is not an https URL", target)
	}
	req := "GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\n"
	for _, h := range headers {
		req += h + "\r\n"
	}
	req += "Connection: close\r\n\r\n"
	lr, resumed, err := runWorkers("tlsload", conns, dur, func(int) loadRequest {
		cfg := &tls.Config{InsecureSkipVerify: true, CurvePreferences: []tls.CurveID{tls.X25519},
			MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}, ServerName: u.Hostname()}
		if resume {
			cfg.ClientSessionCache = tls.NewLRUClientSessionCache(1)
			// Each worker's first connection gets the ticket the measured
			// ones resume: not counted.
			_, _ = oneTLSRequest(u.Host, cfg, req)
		}
		return func() (bool, error) { return oneTLSRequest(u.Host, cfg, req) }
	})
	if err != nil {
		return tlsloadResult{}, err
	}
	res := tlsloadResult{loadResult: lr, Resumed: resumed}
	switch {
	case resume && resumed*10 < res.Requests*9:
		return res, fmt.Errorf("tlsload: %d of %d connections resumed their session, want nine in ten", resumed, res.Requests)
	case !resume && resumed > 0:
		return res, fmt.Errorf("tlsload: %d connections resumed without -resume", resumed)
	}
	return res, nil
}

var errTLSStatus = errors.New("tlsload: status not 200")

// oneTLSRequest is one connection: handshake, request, whole response.
func oneTLSRequest(host string, cfg *tls.Config, req string) (resumed bool, err error) {
	nc, err := net.DialTimeout("tcp", host, 5*time.Second)
	if err != nil {
		return false, err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	c := tls.Client(nc, cfg)
	if err := c.Handshake(); err != nil {
		return false, err
	}
	if _, err := io.WriteString(c, req); err != nil {
		return false, err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 4<<10), nil)
	if err != nil {
		return false, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return false, err
	}
	if resp.StatusCode != 200 {
		return false, errTLSStatus
	}
	// A TLS 1.3 ticket comes after the handshake: reading to the end
	// (the server closes) has the client take it for the next dial.
	_, _ = io.Copy(io.Discard, c)
	return c.ConnectionState().DidResume, nil
}
