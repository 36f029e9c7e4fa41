// Package accesslog owns the access log's writer: one JSON line per
// request, byte for byte what slog's JSONHandler writes for the same
// attributes, encoded without a slog.Record (WriteLine, AppendLine) and
// written in 64 KiB batches, a batch at most 100 ms after its first line;
// Close writes what is pending. Logger gives a *slog.Logger over the same
// batch for proxy.Options.AccessLog, and Of finds the Log behind it, which
// is how the data path takes the fast path.
package accesslog
