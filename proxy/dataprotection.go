package proxy

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/tether-proxy/tether/keyring/dataprotection"
	"github.com/tether-proxy/tether/proxy/affinity"
	"github.com/tether-proxy/tether/proxy/config"
)

// dpCache keeps the Data Protection key ring across config reloads while
// its section and certificate files are unchanged: the ring re-reads its
// directory by itself, so reopening it on every reload would only repeat
// the certificate work.
type dpCache struct {
	mu  sync.Mutex
	key dpKey
	app *dataprotection.Application
}

// dpKey is what the opened ring depends on: the directory, the
// discriminator, and every certificate with its files' modification times.
type dpKey string

// dataProtection opens cfg.DataProtection's key ring for the affinity
// providers (docs/YARP.md, "Moving live sessions"). p is nil when only
// compiling: the ring is then opened and dropped, so `config validate`
// reports a key ring it cannot read.
func dataProtection(cfg *config.Config, p *Proxy) (affinity.Yarp, config.Errors) {
	d := cfg.DataProtection
	if d == nil {
		return affinity.Yarp{}, nil
	}
	type certAt struct {
		path string
		c    config.DataProtectionCertificate
	}
	var certs []certAt
	if d.Certificate != nil {
		certs = append(certs, certAt{"DataProtection.Certificate", *d.Certificate})
	}
	for i, c := range d.Certificates {
		certs = append(certs, certAt{fmt.Sprintf("DataProtection.Certificates[%d]", i), c})
	}
	k := fmt.Sprintf("%q %q;", d.KeyRingPath, d.ApplicationDiscriminator)
	for _, c := range certs {
		k += fmt.Sprintf("%q %q %q %v %v;", c.c.Path, c.c.KeyPath, c.c.Password, modTime(c.c.Path), modTime(c.c.KeyPath))
	}
	if p != nil {
		p.dp.mu.Lock()
		defer p.dp.mu.Unlock()
		if p.dp.app != nil && p.dp.key == dpKey(k) {
			return affinity.Yarp{Protection: p.dp.app, Issue: d.IssueYarpValues}, nil
		}
	}
	opts := dataprotection.Options{}
	if p != nil {
		opts.Now = p.now
	}
	var errs config.Errors
	for _, c := range certs {
		if c.c.Path == "" {
			continue // the validator reports it
		}
		cert, err := dataprotection.LoadCertificate(c.c.Path, c.c.KeyPath, c.c.Password)
		if err != nil {
			errs = append(errs, config.FieldError{Path: c.path, Message: err.Error()})
			continue
		}
		opts.Certificates = append(opts.Certificates, cert)
	}
	if errs != nil {
		return affinity.Yarp{}, errs
	}
	ring, err := dataprotection.Open(d.KeyRingPath, opts)
	if err != nil {
		return affinity.Yarp{}, config.Errors{{Path: "DataProtection.KeyRingPath", Message: err.Error()}}
	}
	app := ring.Application(d.ApplicationDiscriminator)
	if p != nil {
		for _, w := range ring.Warnings() {
			p.logger.Warn("data protection key ring", "warning", w)
		}
		p.dp.key, p.dp.app = dpKey(k), app
	}
	return affinity.Yarp{Protection: app, Issue: d.IssueYarpValues}, nil
}

func modTime(path string) time.Time {
	if path == "" {
		return time.Time{}
	}
	fi, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}
