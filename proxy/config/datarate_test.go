package config

import (
	"testing"
	"time"
)

// Kestrel's MinRequestBodyDataRate and MinResponseDataRate: defaults,
// values in Limits or Kestrel.Limits, null to switch one off.
func TestMinDataRates(t *testing.T) {
	noEnv := LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }}
	type rate struct {
		bps   float64
		grace time.Duration
		on    bool
	}
	cases := []struct {
		desc     string
		in       string
		req, res rate
	}{
		{"defaults", ``, rate{240, 5 * time.Second, true}, rate{240, 5 * time.Second, true}},
		{"in Limits", `"Limits": {"MinRequestBodyDataRate": {"BytesPerSecond": 100, "GracePeriod": "00:00:10"}, "MinResponseDataRate": {"bytespersecond": "50.5", "graceperiod": "2s"}}`,
			rate{100, 10 * time.Second, true}, rate{50.5, 2 * time.Second, true}},
		{"in Kestrel.Limits", `"Kestrel": {"Limits": {"MinRequestBodyDataRate": {"BytesPerSecond": 1000, "GracePeriod": "00:00:03"}}}`,
			rate{1000, 3 * time.Second, true}, rate{240, 5 * time.Second, true}},
		{"the same in both", `"Limits": {"MinResponseDataRate": {"BytesPerSecond": 10, "GracePeriod": "00:00:03"}}, "Kestrel": {"Limits": {"MinResponseDataRate": {"BytesPerSecond": 10, "GracePeriod": "3s"}}}`,
			rate{240, 5 * time.Second, true}, rate{10, 3 * time.Second, true}},
		{"the same in both, one with the default grace period spelt out", `"Limits": {"MinRequestBodyDataRate": {"BytesPerSecond": 10}}, "Kestrel": {"Limits": {"MinRequestBodyDataRate": {"BytesPerSecond": 10, "GracePeriod": "00:00:05"}}}`,
			rate{10, 5 * time.Second, true}, rate{240, 5 * time.Second, true}},
		{"grace period left out", `"Limits": {"MinRequestBodyDataRate": {"BytesPerSecond": 1}}`,
			rate{1, 5 * time.Second, true}, rate{240, 5 * time.Second, true}},
		{"null switches off", `"Limits": {"MinRequestBodyDataRate": null}, "Kestrel": {"Limits": {"MinResponseDataRate": null}}`,
			rate{}, rate{}},
		{"zero bytes per second switches off", `"Limits": {"MinRequestBodyDataRate": {"BytesPerSecond": 0, "GracePeriod": "00:00:05"}}`,
			rate{0, 5 * time.Second, false}, rate{240, 5 * time.Second, true}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			in := "{" + tc.in
			if tc.in != "" {
				in += ", "
			}
			c, _, err := ParseWith([]byte(in+minimalRP+"}"), "json", noEnv)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range []struct {
				name string
				got  MinDataRate
				want rate
			}{{"MinRequestBodyDataRate", c.Limits.MinRequestBodyDataRate, tc.req}, {"MinResponseDataRate", c.Limits.MinResponseDataRate, tc.res}} {
				bps, grace, on := x.got.Effective()
				if got := (rate{bps, grace, on}); got != x.want {
					t.Errorf("%s: %+v, want %+v", x.name, got, x.want)
				}
			}
		})
	}
	// A config built in code gets Kestrel's defaults too.
	if bps, grace, on := (MinDataRate{}).Effective(); bps != 240 || grace != 5*time.Second || !on {
		t.Errorf("zero MinDataRate: %v %v %v", bps, grace, on)
	}
}

func TestMinDataRateErrors(t *testing.T) {
	cases := []struct {
		desc, in, path, msg string
	}{
		{"negative rate", `"Limits": {"MinRequestBodyDataRate": {"BytesPerSecond": -1, "GracePeriod": "00:00:05"}}`, "Limits.MinRequestBodyDataRate.BytesPerSecond", "must not be negative"},
		{"negative rate in Kestrel.Limits", `"Kestrel": {"Limits": {"MinResponseDataRate": {"BytesPerSecond": -5}}}`, "Kestrel.Limits.MinResponseDataRate.BytesPerSecond", "must not be negative"},
		{"rate not a number", `"Limits": {"MinResponseDataRate": {"BytesPerSecond": "fast", "GracePeriod": "00:00:05"}}`, "Limits.MinResponseDataRate.BytesPerSecond", "want a number"},
		{"rate not finite", `"Limits": {"MinResponseDataRate": {"BytesPerSecond": "NaN"}}`, "Limits.MinResponseDataRate.BytesPerSecond", "want a number"},
		{"rate missing", `"Limits": {"MinRequestBodyDataRate": {"GracePeriod": "00:00:05"}}`, "Limits.MinRequestBodyDataRate.BytesPerSecond", "required"},
		{"grace not a duration", `"Limits": {"MinRequestBodyDataRate": {"BytesPerSecond": 240, "GracePeriod": "soon"}}`, "Limits.MinRequestBodyDataRate.GracePeriod", ""},
		{"grace negative", `"Limits": {"MinRequestBodyDataRate": {"BytesPerSecond": 240, "GracePeriod": "-5s"}}`, "Limits.MinRequestBodyDataRate.GracePeriod", "negative"},
		{"grace of one second", `"Limits": {"MinResponseDataRate": {"BytesPerSecond": 240, "GracePeriod": "00:00:01"}}`, "Limits.MinResponseDataRate.GracePeriod", "more than 1 second"},
		{"a number, not an object", `"Limits": {"MinRequestBodyDataRate": 240}`, "Limits.MinRequestBodyDataRate", "want an object"},
		{"an unknown key", `"Limits": {"MinRequestBodyDataRate": {"BytesPerSecond": 240, "GracePeriodd": "00:00:05"}}`, "Limits.MinRequestBodyDataRate.GracePeriodd", ""},
		{"different in both", `"Limits": {"MinRequestBodyDataRate": {"BytesPerSecond": 240}}, "Kestrel": {"Limits": {"MinRequestBodyDataRate": {"BytesPerSecond": 100}}}`, "Kestrel.Limits.MinRequestBodyDataRate", "differs from Limits.MinRequestBodyDataRate"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, _, err := ParseWith([]byte("{"+tc.in+", "+minimalRP+"}"), "json", LoadOptions{Strict: true, LookupEnv: func(string) (string, bool) { return "", false }})
			wantFieldError(t, err, tc.path, tc.msg)
		})
	}
}
