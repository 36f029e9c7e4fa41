package proxy

import (
	"fmt"
	"testing"
)

// A destination's latency histogram exists once it took a request: 1,000
// destinations that took none carry no series (nor their heap).
func TestDurationSeriesAreBoundOnFirstUse(t *testing.T) {
	be := newBackend(t, nil)
	dests := map[string]string{}
	for i := range 1000 {
		dests[fmt.Sprintf("d%d", i)] = be.URL
	}
	h := newHarness(t, mustParse(t, simpleConfig(dests, `"LoadBalancingPolicy": "FirstAlphabetical"`, "", "")), nil)
	series := func() int {
		mfs, err := h.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "tether_request_duration_seconds" {
				return len(mf.GetMetric())
			}
		}
		return 0
	}
	if n := series(); n != 0 {
		t.Fatalf("%d duration series before any request, want 0", n)
	}
	for range 3 {
		if resp, _ := get(t, nil, h.front.URL+"/", nil); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
	}
	if n := series(); n != 1 {
		t.Fatalf("%d duration series after requests to one destination, want 1", n)
	}
	if c := metricValue(t, h, "tether_request_duration_seconds", map[string]string{"route": "r", "cluster": "c", "destination": "d0"}); c != 3 {
		t.Fatalf("d0's histogram counted %v requests, want 3", c)
	}
}
