package health

// Contract stub: the health work replaces this file.

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// ActiveOptions are the active checker's collaborators.
type ActiveOptions struct {
	// Transport sends probes; the cluster's shared transport.
	Transport http.RoundTripper
	// Metadata is the cluster's metadata (YARP reads
	// "ConsecutiveFailuresHealthPolicy.Threshold" from it).
	Metadata map[string]string
	Logger   *slog.Logger
}

// Active probes the destinations of one cluster.
type Active struct{}

// NewActive builds a checker; it does nothing until Start.
func NewActive(clusterID string, c *upstream.Cluster, cfg config.ActiveHealthCheck, opts ActiveOptions) *Active {
	panic("contract stub")
}

// Start begins probing in the background.
func (a *Active) Start() {}

// Stop ends probing and waits for probe goroutines to exit.
func (a *Active) Stop() {}

// Passive turns proxied-request failures into local exclusions.
type Passive struct{}

// NewPassive builds the passive policy for one cluster.
func NewPassive(cfg config.PassiveHealthCheck) *Passive { panic("contract stub") }

// Report records the result of one proxied request to d: err is the
// transport error (nil on a response), status the response status.
func (p *Passive) Report(d *upstream.Destination, now time.Time, err error, status int) {}
