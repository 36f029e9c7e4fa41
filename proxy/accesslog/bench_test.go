package accesslog

import (
	"io"
	"testing"
	"time"
)

// benchLine is a typical request's line: ids, a loopback client, a short
// path, config ids and an affinity outcome.
var benchLine = Line{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", Remote: "192.0.2.1",
	Method: "GET", Host: "example.com", Path: "/api/users/42", Status: 200, Bytes: 1024, DurationMs: 0.123,
	Route: "route-api", Cluster: "cluster-api", Destination: "d1", Affinity: "existing"}

// benchTimes steps through time as a busy server's request ends do: a
// new nanosecond fraction every line, a new second every few hundred.
func benchTimes() func() time.Time {
	at := time.Date(2026, 12, 1, 11, 21, 21, 162687597, time.UTC)
	return func() time.Time {
		at = at.Add(1234567 * time.Nanosecond)
		return at
	}
}

func BenchmarkAppendLine(b *testing.B) {
	next := benchTimes()
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendLine(buf[:0], next(), benchLine)
	}
}

func BenchmarkWriteLine(b *testing.B) {
	al := New(io.Discard)
	defer al.Close()
	next := benchTimes()
	b.ReportAllocs()
	for b.Loop() {
		al.WriteLine(next(), benchLine)
	}
}
