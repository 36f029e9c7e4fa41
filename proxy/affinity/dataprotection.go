package affinity

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/tether-proxy/tether/keyring/dataprotection"
	"github.com/tether-proxy/tether/proxy/config"
)

// YarpRing keeps the Data Protection key ring across config reloads while
// its section and certificate files are unchanged: the ring re-reads its
// directory by itself, so reopening it on every reload would only repeat
// the certificate work.
type YarpRing struct {
	mu  sync.Mutex
	key ringKey
	app *dataprotection.Application
}

// ringKey is what the opened ring depends on: the directory, the
// discriminator, and every certificate with its files' modification times.
type ringKey string

// Application is the ring's application opened last, nil before.
func (r *YarpRing) Application() *dataprotection.Application {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.app
}

// OpenYarp opens cfg.DataProtection's key ring for the providers
// (docs/YARP.md, "Moving live sessions"), or keeps the one r holds. r is
// nil when only compiling: the ring is then opened and dropped, so
// `config validate` reports a key ring it cannot read. now (nil: the
// ring's clock) and logger (for the ring's warnings) serve only with r.
func OpenYarp(cfg *config.Config, r *YarpRing, now func() time.Time, logger *slog.Logger) (Yarp, config.Errors) {
	d := cfg.DataProtection
	if d == nil {
		return Yarp{}, nil
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
	if r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.app != nil && r.key == ringKey(k) {
			return Yarp{Protection: r.app, Issue: d.IssueYarpValues}, nil
		}
	}
	opts := dataprotection.Options{}
	if r != nil {
		opts.Now = now
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
		return Yarp{}, errs
	}
	ring, err := dataprotection.Open(d.KeyRingPath, opts)
	if err != nil {
		return Yarp{}, config.Errors{{Path: "DataProtection.KeyRingPath", Message: err.Error()}}
	}
	app := ring.Application(d.ApplicationDiscriminator)
	if r != nil {
		for _, w := range ring.Warnings() {
			logger.Warn("data protection key ring", "warning", w)
		}
		r.key, r.app = ringKey(k), app
	}
	return Yarp{Protection: app, Issue: d.IssueYarpValues}, nil
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
