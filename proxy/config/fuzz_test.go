package config

import (
	"errors"
	"os"
	"strings"
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
	f.Add([]byte("\ufeff{"+minimalRP+`, "$schema": "x"}`), false)
	f.Add([]byte("\ufeffUrls: http://*:1\n"), true)
	f.Add([]byte(strings.Repeat("[", 100_000)), false)
	f.Add([]byte(`{"a": "[\"[", /* [[ */ "b": [[[]]]} // [`), false)
	f.Add([]byte(strings.Repeat("- ", 1001)+"x\n"), true)
	f.Add([]byte("a: &a [[[[1]]]]\nb: [*a, [*a]]\n"), true)
	f.Add([]byte("Urls: x\n---\nUrls: y\n"), true)
	f.Add([]byte(`{"Limits": {"ShutdownTimeout": 0, "KeepAliveTimeout": "00:00"}, "ReverseProxy": {"Clusters": {"c": {"DrainTimeout": "1.5"}}}}`), false)
	f.Add([]byte(`{"Kestrel": {"Endpoints": {"a": {"Url": "https://[::]:1/", "Protocols": "Http1, Http3", "SslProtocols": ["Tls12", "tls13"]}},
		"Certificates": {"Default": {"Path": "x.pfx", "Password": ""}}, "Limits": {"MaxRequestBodySize": "-5"}}, "Urls": "http://unix:/x"}`), false)
	f.Add([]byte(`{"ReverseProxy": {"Clusters": {"c": {"HttpRequest": {"Version": "3", "VersionPolicy": "requestversionexact"},
		"HttpClient": {"SslProtocols": "Tls, Tls13"}}}, "Routes": {"r": {"AuthorizationPolicy": "x", "Timeout": "0", "Ordre": 1}}}, "MyApp": {}}`), false)
	f.Add([]byte(`{"Limits": {"MinRequestBodyDataRate": {"BytesPerSecond": "1e309", "GracePeriod": "00:00:05"}, "MinResponseDataRate": null},
		"Kestrel": {"Limits": {"MinResponseDataRate": {"BytesPerSecond": -0.5}, "MinRequestBodyDataRate": [1]}}}`), false)
	f.Add([]byte("Limits:\n  MinRequestBodyDataRate: {BytesPerSecond: .5, GracePeriod: 2s}\n  MinResponseDataRate: ~\n"), true)
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
			// Every error says where: a JSON path, or the file as a
			// whole that does not parse (at a line where the parser
			// gives one).
			if e.Path == "" && !strings.Contains(e.Message, "invalid JSON: ") && !strings.Contains(e.Message, "invalid YAML: ") {
				t.Fatalf("error without a path: %v", e)
			}
		}
	})
}
