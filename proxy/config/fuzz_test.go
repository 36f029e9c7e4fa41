package config

import (
	"errors"
	"os"
	"testing"
)

func FuzzParse(f *testing.F) {
	app, err := os.ReadFile("testdata/appsettings.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(app, false)
	f.Add([]byte(`{`+minimalRP+`, "Urls": "http://*:1;https://+:2"}`), false)
	f.Add([]byte(`{"ReverseProxy": {"Clusters": {"a": {}, "A": null}}, /* c */}`), false)
	f.Add([]byte(`{"Listeners": [{"Address": ":1", "Redirect": {"StatusCode": "9"}}], "Limits": {"KeepAliveTimeout": "1.02:03:04.5"}}`), false)
	f.Add([]byte("ReverseProxy:\n  Routes:\n    r: {ClusterId: c, Match: {Path: /}}\n  Clusters:\n    c:\n      Destinations: {d: {Address: 'http://x'}}\n"), true)
	f.Add([]byte("a: &a [*a, *a]\nb: *a\n"), true)
	f.Add([]byte("Listeners: [{Address: ~}]\nTrustedProxies: [1, 2]\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, yaml bool) {
		format := "json"
		if yaml {
			format = "yaml"
		}
		c, _, err := Parse(data, format)
		if err == nil {
			if c == nil {
				t.Fatal("nil config without error")
			}
			return
		}
		var es Errors
		if !errors.As(err, &es) || len(es) == 0 {
			t.Fatalf("error is not a non-empty Errors: %v", err)
		}
		for _, e := range es {
			if e.Path == "" {
				t.Fatalf("error without a path: %v", e)
			}
		}
	})
}
