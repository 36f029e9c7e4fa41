package accesslog

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tether-proxy/tether/proxy/internal/swar"
)

// linePool holds the encoding buffers of access lines.
var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// WriteLine adds one request's line, encoded at time t, to the batch: the
// line slog's JSONHandler writes for the same attributes, without building
// a slog.Record (one allocation and reflection-free but generic encoding
// per request), and without a write(2) of its own.
func (a *Log) WriteLine(t time.Time, l Line) {
	bp := linePool.Get().(*[]byte)
	b := AppendLine((*bp)[:0], t, l)
	a.Write(b)
	*bp = b
	linePool.Put(bp)
}

// Of is the Log whose Logger l is, nil when l is not one.
func Of(l *slog.Logger) *Log {
	if h, ok := l.Handler().(*lineHandler); ok {
		return h.log
	}
	return nil
}

// Line is one request's access log fields.
type Line struct {
	TraceID, SpanID, Remote, Method, Host, Path string
	Status                                      int
	Bytes                                       int64
	DurationMs                                  float64
	Route, Cluster, Destination, Affinity       string
	Aborted                                     bool
}

// AppendLine appends the line exactly as slog.NewJSONHandler(w,
// nil) writes LogAttrs(ctx, LevelInfo, "request", the attributes of
// logAccess) at time t (TestAccessLineMatchesSlog holds it to that).
func AppendLine(b []byte, t time.Time, l Line) []byte {
	b = append(b, `{"time":"`...)
	b = appendLogTime(b, t)
	b = append(b, `","level":"INFO","msg":"request","trace_id":`...)
	b = appendJSONString(b, l.TraceID)
	b = append(b, `,"span_id":`...)
	b = appendJSONString(b, l.SpanID)
	b = append(b, `,"remote":`...)
	b = appendJSONString(b, l.Remote)
	b = append(b, `,"method":`...)
	b = appendJSONString(b, l.Method)
	b = append(b, `,"host":`...)
	b = appendJSONString(b, l.Host)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, l.Path)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(l.Status), 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, l.Bytes, 10)
	b = append(b, `,"duration_ms":`...)
	b = appendJSONFloat(b, l.DurationMs)
	b = append(b, `,"route":`...)
	b = appendJSONString(b, l.Route)
	b = append(b, `,"cluster":`...)
	b = appendJSONString(b, l.Cluster)
	b = append(b, `,"destination":`...)
	b = appendJSONString(b, l.Destination)
	b = append(b, `,"affinity":`...)
	b = appendJSONString(b, l.Affinity)
	b = append(b, `,"aborted":`...)
	b = strconv.AppendBool(b, l.Aborted)
	return append(b, "}\n"...)
}

// logSecond is the text of one second of one zone in RFC 3339: the date
// and time of day, and the zone. Lines come many to a second, so the
// second's text is formatted once (appendLogTime).
type logSecond struct {
	sec       int64
	loc       *time.Location
	day, zone []byte
}

var lastLogSecond atomic.Pointer[logSecond]

// appendLogTime appends t as t.AppendFormat(b, time.RFC3339Nano) does.
func appendLogTime(b []byte, t time.Time) []byte {
	sec, loc := t.Unix(), t.Location()
	ls := lastLogSecond.Load()
	if ls == nil || ls.sec != sec || ls.loc != loc {
		ls = &logSecond{sec: sec, loc: loc,
			day: t.AppendFormat(nil, "2006-01-02T15:04:05"), zone: t.AppendFormat(nil, "Z07:00")}
		lastLogSecond.Store(ls)
	}
	b = appendFraction(append(b, ls.day...), t.Nanosecond(), 9)
	return append(b, ls.zone...)
}

// appendFraction appends "." and the digits of frac, a fraction of width
// digits, without trailing zeros; nothing when frac is 0.
func appendFraction(b []byte, frac, width int) []byte {
	if frac == 0 {
		return b
	}
	var d [9]byte
	for i := width - 1; i >= 0; i-- {
		d[i] = byte('0' + frac%10)
		frac /= 10
	}
	for d[width-1] == '0' {
		width--
	}
	b = append(b, '.')
	return append(b, d[:width]...)
}

// appendJSONFloat formats f as encoding/json does (slog's JSONHandler
// calls json.Marshal for floats).
func appendJSONFloat(b []byte, f float64) []byte {
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) || math.IsNaN(f) || math.IsInf(f, 0) {
		// Exponent form and the errors: rare enough for json.Marshal.
		if j, err := json.Marshal(f); err == nil {
			return append(b, j...)
		}
		return append(b, `"!ERROR:invalid float"`...)
	}
	if f >= 0 && f < 1e12 {
		// A whole number of microseconds in milliseconds (duration_ms):
		// its shortest form is the decimal itself, written without the
		// shortest-float search (the doubles near f are far closer
		// together than 0.001, so no shorter decimal reads back as f).
		if us := math.Round(f * 1000); float64(int64(us))/1000 == f {
			return appendMillis(b, int64(us))
		}
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}

// appendMillis writes us/1000 in decimal, without trailing zeros.
func appendMillis(b []byte, us int64) []byte {
	return appendFraction(strconv.AppendInt(b, us/1000, 10), int(us%1000), 3)
}

// appendJSONString appends s quoted and escaped as slog's JSONHandler
// does: control characters, quote and backslash escaped, invalid UTF-8 as
// U+FFFD, U+2028 and U+2029 escaped, HTML characters left as they are.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	i := plainJSONPrefix(s)
	if i == len(s) {
		b = append(b, s...) // the usual field: nothing to escape
		return append(b, '"')
	}
	start := 0
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// plainJSONPrefix is how many of s's first bytes JSON takes as they are
// (printable ASCII other than quote and backslash): s is looked at eight
// bytes at a time, and from the first word that fails, and in the last
// bytes, one by one. A word passes when none of its bytes is below 0x20,
// equal to '"' or '\\' (a byte of x^'"' or x^'\\' is zero then), or from
// 0x80 up.
func plainJSONPrefix(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := swar.Word(s[i:])
		if swar.Below(x, 0x20)|swar.Has(x, '"')|swar.Has(x, '\\')|swar.NonASCII(x) != 0 {
			break
		}
	}
	for ; i < len(s) && jsonPlain[s[i]]; i++ {
	}
	return i
}

// jsonPlain: the bytes JSON takes as they are.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Log is the access log's writer: JSON lines, as slog's
// JSONHandler writes them, collected in memory and written in batches (a
// full 64 KiB batch at once, else within flushDelay of its first
// line), so a request does not pay a write(2) of its own. Close writes
// what is pending: after the server has shut down (every handler
// returned) no line is lost.
type Log struct {
	w io.Writer
	// wmu serialises writes to w and keeps batches in order; mu guards
	// the pending batch and is never held during a write.
	wmu     sync.Mutex
	mu      sync.Mutex
	pending []byte
	spare   []byte
	armed   bool
	closed  bool
	timer   *time.Timer
	handler slog.Handler
}

const (
	batchSize  = 64 << 10
	flushDelay = 100 * time.Millisecond
)

// New batches lines for w.
func New(w io.Writer) *Log {
	a := &Log{w: w, pending: make([]byte, 0, batchSize)}
	a.timer = time.AfterFunc(time.Hour, a.flushLater)
	a.timer.Stop()
	a.handler = &lineHandler{Handler: slog.NewJSONHandler(a, nil), log: a}
	return a
}

// Logger is a logger over the batch for proxy.Options.AccessLog: the data
// path writes its lines to the batch directly (WriteLine); any other
// record goes through slog's JSONHandler into the same batch.
func (a *Log) Logger() *slog.Logger { return slog.New(a.handler) }

// lineHandler marks a logger as a Log's (Of finds it with a type
// assertion).
type lineHandler struct {
	slog.Handler
	log *Log
}

func (h *lineHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return h.Handler.WithAttrs(attrs) // not the fast path's: its lines lack these
}

func (h *lineHandler) WithGroup(name string) slog.Handler { return h.Handler.WithGroup(name) }

// Handle forwards (the embedded Handle would do; it is spelled out so
// the interface guard below reads as the intent).
func (h *lineHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.Handler.Handle(ctx, r)
}

// Write adds p (whole lines) to the batch. It never fails: like slog's
// handlers, the data path does not act on a log write's error.
func (a *Log) Write(p []byte) (int, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		a.wmu.Lock()
		a.w.Write(p) // after Close: at once, unbatched
		a.wmu.Unlock()
		return len(p), nil
	}
	a.pending = append(a.pending, p...)
	full := len(a.pending) >= batchSize
	if !full && !a.armed {
		a.armed = true
		a.timer.Reset(flushDelay)
	}
	a.mu.Unlock()
	if full {
		a.Flush()
	}
	return len(p), nil
}

func (a *Log) flushLater() { a.Flush() }

// Flush writes the pending batch now.
func (a *Log) Flush() {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	a.mu.Lock()
	batch := a.pending
	a.pending, a.spare = a.spare[:0], nil
	if a.armed {
		a.armed = false
		a.timer.Stop()
	}
	a.mu.Unlock()
	if len(batch) > 0 {
		a.w.Write(batch)
	}
	if cap(batch) > 4*batchSize {
		batch = nil // an outsized burst: do not keep its buffer
	}
	a.mu.Lock()
	a.spare = batch[:0]
	a.mu.Unlock()
}

// Close writes the pending lines; later lines are written at once.
func (a *Log) Close() error {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.Flush()
	return nil
}

var (
	_ io.Writer    = (*Log)(nil)
	_ slog.Handler = (*lineHandler)(nil)
)
