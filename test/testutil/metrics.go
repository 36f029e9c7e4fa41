package testutil

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Counters is the value of each counter series c collects, keyed by its
// label values in the order of their names, joined with "," ("" for a
// series without labels). A series never counted is absent (reads as 0).
func Counters(t testing.TB, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var values []string
			for _, l := range m.GetLabel() {
				values = append(values, l.GetValue())
			}
			out[strings.Join(values, ",")] += m.GetCounter().GetValue()
		}
	}
	return out
}
