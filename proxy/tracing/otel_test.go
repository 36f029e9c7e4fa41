package tracing

import (
	"context"
	"testing"
)

func TestExportIsOffUnlessTheEnvironmentAsks(t *testing.T) {
	cases := []struct {
		desc string
		env  map[string]string
		want bool
	}{
		{"nothing set: off", nil, false},
		{"OTEL_EXPORTER_OTLP_ENDPOINT turns it on", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT turns it on", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{"OTEL_SDK_DISABLED wins", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{"OTEL_TRACES_EXPORTER=none wins", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"} {
				t.Setenv(k, c.env[k])
			}
			if got := Enabled(); got != c.want {
				t.Fatalf("Enabled = %v, want %v", got, c.want)
			}
			exp, err := FromEnv(context.Background(), "n1")
			if err != nil {
				t.Fatal(err)
			}
			if (exp != nil) != c.want {
				t.Fatalf("FromEnv = %v, want an exporter: %v", exp, c.want)
			}
			if err := exp.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
