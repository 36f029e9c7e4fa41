package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// The h3load subcommand is the load of the h3 case: h2load as packaged
// here speaks no HTTP/3, so quic-go's client is the load, shaped as
// h2load's for h2-tls: -conns QUIC connections (one http3.Transport each),
// each with -m requests in flight, over and over for -d. It prints a
// loadResult as JSON.

func runH3Load(args []string) error {
	fs := flag.NewFlagSet("h3load", flag.ExitOnError)
	target := fs.String("url", "", "https URL of an HTTP/3 listener")
	conns := fs.Int("conns", 4, "QUIC connections")
	streams := fs.Int("m", 8, "requests in flight on each connection")
	dur := fs.Duration("d", 3*time.Second, "duration")
	var headers headerFlags
	fs.Var(&headers, "H", "request field (repeatable)")
	fs.Parse(args)
	res, err := h3Load(*target, *conns, *streams, *dur, headers)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

var errH3Status = errors.New("h3load: status not 200")

func h3Load(target string, conns, streams int, dur time.Duration, headers []string) (loadResult, error) {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "https" {
		return loadResult{}, fmt.Errorf("h3load: %q is not an https URL", target)
	}
	hdr := http.Header{}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		hdr.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	trs := make([]*http3.Transport, conns)
	for c := range trs {
		trs[c] = &http3.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableCompression: true}
		defer trs[c].Close()
	}
	res, _, err := runWorkers("h3load", conns*streams, dur, func(i int) loadRequest {
		tr := trs[i/streams] // -m workers share each connection
		return func() (bool, error) { return false, oneH3Request(tr, u.String(), hdr) }
	})
	return res, err
}

func oneH3Request(tr *http3.Transport, target string, hdr http.Header) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	req.Header = hdr.Clone()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return errH3Status
	}
	return nil
}
