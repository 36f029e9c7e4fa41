// Package tracing owns distributed tracing on the data path (proxy/DESIGN.md,
// "Forwarded headers and trust"), as YARP does it through .NET's Activity:
// W3C Trace Context (traceparent, tracestate) parsed strictly and written for
// the backend with tether's own span as the parent, and optional export of
// those spans over OTLP through the OpenTelemetry Go SDK.
//
// Export is off unless the standard OpenTelemetry environment asks for it
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set,
// OTEL_SDK_DISABLED not true, OTEL_TRACES_EXPORTER not "none"); the
// exporter then reads the rest of the OTEL_* variables itself (protocol
// http/protobuf, headers, timeouts, OTEL_TRACES_SAMPLER, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES). With export off nothing here allocates
// beyond the one traceparent string per request.
package tracing
