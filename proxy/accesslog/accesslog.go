package accesslog

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tether-proxy/tether/proxy/internal/swar"
)

// linePool holds the encoding buffers of access lines.
var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// WriteLine adds one request's line, encoded at time t, to the batch: the
// line slog's JSONHandler writes for the same attributes, without building
// a slog.Record (one allocation and reflection-free but generic encoding
// per request), and without a write(2) of its own.
//
// The line is encoded in the batch itself when the batch's lock is free
// and its buffer has the room: no pooled buffer to take and give back, no
// copy of the line. Otherwise (another request holds the lock, the batch
// is nearly full, the log is closed) it is encoded outside the lock and
// added as Write adds it, so a request never waits for another's
// encoding.
func (a *Log) WriteLine(t time.Time, l Line) {
	if a.mu.TryLock() {
		if !a.closed && cap(a.pending)-len(a.pending) >= lineNeed(&l) {
			a.pending = appendLine(a.pending, t, &l)
			full := a.addedLocked()
			a.mu.Unlock()
			if full {
				a.Flush()
			}
			return
		}
		a.mu.Unlock()
	}
	bp := linePool.Get().(*[]byte)
	b := appendLine((*bp)[:0], t, &l)
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
	// Target, when set, is the line's route, cluster, destination and
	// affinity, encoded once (NewTarget): the four strings above are then
	// not read.
	Target *Target
}

// Target is a line's route, cluster, destination and affinity fields as
// the line has them, the text between the duration and the aborted flag's
// value. Those four strings come from the configuration and a handful of
// outcomes, so the data path encodes each combination once rather than
// checking and copying them on every line.
type Target struct{ text, aff string }

// Targets are the Targets of one route, cluster and destination, each
// affinity value's made on its first use.
type Targets struct {
	route, cluster, destination string
	t                           [8]atomic.Pointer[Target]
}

// NewTargets is the Targets of route, cluster and destination.
func NewTargets(route, cluster, destination string) *Targets {
	return &Targets{route: route, cluster: cluster, destination: destination}
}

// Get is the Target with affinity aff, kept at i (from 0 to 7: one
// number an affinity value, for the caller to choose); nil for another i.
func (ts *Targets) Get(i int, aff string) *Target {
	if uint(i) >= uint(len(ts.t)) {
		return nil
	}
	if tg := ts.t[i].Load(); tg != nil && tg.aff == aff {
		return tg
	}
	tg := NewTarget(ts.route, ts.cluster, ts.destination, aff)
	ts.t[i].Store(tg)
	return tg
}

// NewTarget encodes the four fields as AppendLine writes them.
func NewTarget(route, cluster, destination, affinity string) *Target {
	b := []byte(`,"route":"`)
	b = appendJSONContent(b, route)
	b = append(b, `","cluster":"`...)
	b = appendJSONContent(b, cluster)
	b = append(b, `","destination":"`...)
	b = appendJSONContent(b, destination)
	b = append(b, `","affinity":"`...)
	b = appendJSONContent(b, affinity)
	b = append(b, `","aborted":`...)
	return &Target{text: string(b), aff: affinity}
}

// AppendLine appends the line exactly as slog.NewJSONHandler(w,
// nil) writes LogAttrs(ctx, LevelInfo, "request", the attributes of
// logAccess) at time t (TestAccessLineMatchesSlog holds it to that). It
// may write anywhere in b's spare capacity.
//
// The line is written in place after one capacity check: fixed text and
// the time's cached parts as fixed-size copies, strings a word at a time
// as they are, numbers two digits at a time. A string JSON does not take
// as it is (rare: an escape or a byte from 0x80 up) sends the whole line
// to appendLineEscaping instead, so the strings need no branch of their
// own here.
func AppendLine(b []byte, t time.Time, l Line) []byte { return appendLine(b, t, &l) }

// appendLine is AppendLine with the line by reference: WriteLine's copy
// of it is the only one.
func appendLine(b []byte, t time.Time, l *Line) []byte {
	if need := lineNeed(l); cap(b)-len(b) < need {
		b = slices.Grow(b, need)
	}
	start := len(b)
	b = b[:cap(b)]
	j := putLogTime(b, start, t)
	var esc, e uint64
	j, esc = putPlain(b, j, l.TraceID)
	j = putConst(b, j, `","span_id":"`)
	j, e = putPlain(b, j, l.SpanID)
	esc |= e
	j = putConst(b, j, `","remote":"`)
	j, e = putPlain(b, j, l.Remote)
	esc |= e
	j = putConst(b, j, `","method":"`)
	j, e = putPlain(b, j, l.Method)
	esc |= e
	j = putConst(b, j, `","host":"`)
	j, e = putPlain(b, j, l.Host)
	esc |= e
	j = putConst(b, j, `","path":"`)
	j, e = putPlain(b, j, l.Path)
	esc |= e
	j = putConst(b, j, `","status":`)
	j = putStatus(b, j, l.Status)
	j = putConst(b, j, `,"bytes":`)
	j = putInt(b, j, l.Bytes)
	j = putConst(b, j, `,"duration_ms":`)
	b, j = putJSONFloat(b, j, l.DurationMs)
	if tg := l.Target; tg != nil {
		if esc != 0 {
			return appendLineEscaping(b[:start], t, l)
		}
		j += copy(b[j:], tg.text)
	} else {
		j = putConst(b, j, `,"route":"`)
		j, e = putPlain(b, j, l.Route)
		esc |= e
		j = putConst(b, j, `","cluster":"`)
		j, e = putPlain(b, j, l.Cluster)
		esc |= e
		j = putConst(b, j, `","destination"`)
		j = putConst(b, j, `:"`)
		j, e = putPlain(b, j, l.Destination)
		esc |= e
		j = putConst(b, j, `","affinity":"`)
		j, e = putPlain(b, j, l.Affinity)
		esc |= e
		if esc != 0 {
			return appendLineEscaping(b[:start], t, l)
		}
		j = putConst(b, j, `","aborted":`)
	}
	if l.Aborted {
		j = putConst(b, j, "true}\n")
	} else {
		j = putConst(b, j, "false}\n")
	}
	return b[:j]
}

// appendLineEscaping is AppendLine for a line with a string that JSON
// does not take as it is, by append.
func appendLineEscaping(b []byte, t time.Time, l *Line) []byte {
	b = slices.Grow(b, lineRoom)
	b = b[:putLogTime(b[:cap(b)], len(b), t)]
	b = appendJSONContent(b, l.TraceID)
	b = append(b, `","span_id":"`...)
	b = appendJSONContent(b, l.SpanID)
	b = append(b, `","remote":"`...)
	b = appendJSONContent(b, l.Remote)
	b = append(b, `","method":"`...)
	b = appendJSONContent(b, l.Method)
	b = append(b, `","host":"`...)
	b = appendJSONContent(b, l.Host)
	b = append(b, `","path":"`...)
	b = appendJSONContent(b, l.Path)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(l.Status), 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, l.Bytes, 10)
	b = append(b, `,"duration_ms":`...)
	b = appendJSONFloat(b, l.DurationMs)
	if tg := l.Target; tg != nil {
		b = append(b, tg.text...)
	} else {
		b = append(b, `,"route":"`...)
		b = appendJSONContent(b, l.Route)
		b = append(b, `","cluster":"`...)
		b = appendJSONContent(b, l.Cluster)
		b = append(b, `","destination":"`...)
		b = appendJSONContent(b, l.Destination)
		b = append(b, `","affinity":"`...)
		b = appendJSONContent(b, l.Affinity)
		b = append(b, `","aborted":`...)
	}
	b = strconv.AppendBool(b, l.Aborted)
	return append(b, "}\n"...)
}

// lineNeed is the spare room appendLine encodes l in without growing b.
func lineNeed(l *Line) int {
	n := len(l.TraceID) + len(l.SpanID) + len(l.Remote) + len(l.Method) + len(l.Host) + len(l.Path) + lineRoom
	if l.Target != nil {
		return n + len(l.Target.text)
	}
	return n + len(l.Route) + len(l.Cluster) + len(l.Destination) + len(l.Affinity)
}

// lineRoom is what a line takes beyond its strings' bytes, with room to
// spare: the fixed text (under 200 bytes), the time's fixed-size copies,
// two integers and a float (at most 20, 20 and 24 bytes).
const lineRoom = 512

// putConst copies c, a constant of at most 16 bytes, to b[j:]: with c's
// length known the copy compiles to two moves at most, where append, copy
// and a longer constant call memmove.
func putConst(b []byte, j int, c string) int {
	copy(b[j:j+len(c)], c)
	return j + len(c)
}

// putPlain copies s to b[j:] and returns the new end and, non-zero when
// JSON does not take all of s as it is (a byte below 0x20, '"', '\\', or
// from 0x80 up), jsonEscape's bits. It writes no byte outside
// b[j:j+len(s)]: a string of eight bytes or more as whole words, the last
// one overlapping the one before; four to seven as two overlapping
// halves; one to three as its first, middle and last byte. Every word is
// tested, none branched on.
func putPlain(b []byte, j int, s string) (int, uint64) {
	n := len(s)
	d := b[j : j+n : j+n]
	var esc uint64
	switch {
	case n >= 8:
		for i := 0; i+8 < n; i += 8 {
			x := swar.Word(s[i : i+8])
			esc |= jsonEscape(x)
			binary.LittleEndian.PutUint64(d[i:i+8], x)
		}
		x := swar.Word(s[n-8:])
		esc |= jsonEscape(x)
		binary.LittleEndian.PutUint64(d[n-8:], x)
	case n >= 4:
		lo := uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
		hi := uint32(s[n-4]) | uint32(s[n-3])<<8 | uint32(s[n-2])<<16 | uint32(s[n-1])<<24
		esc = jsonEscape(uint64(lo) | uint64(hi)<<32)
		binary.LittleEndian.PutUint32(d, lo)
		binary.LittleEndian.PutUint32(d[n-4:], hi)
	case n > 0:
		c0, c1, c2 := s[0], s[n/2], s[n-1]
		esc = jsonEscape(uint64(c0) | uint64(c1)<<8 | uint64(c2)<<16 | 0x2020202020<<24) // the rest spaces
		d[0], d[n/2], d[n-1] = c0, c1, c2
	}
	return j + n, esc & 0x8080808080808080
}

// jsonEscape has a byte's top bit set (once masked with 0x80 in every
// byte) when a byte of x is below 0x20, '"', '\\' or from 0x80 up: exact
// as to whether there is one (TestJSONEscapeIsExact). y = x^0x02 moves '"'
// to 0x20 and keeps the bytes below 0x20 below it, so that y-0x21 borrows
// into the top bit of the lowest byte that is either (no byte from 0x21
// to 0x7f borrows); y itself has it from 0x80 up; and a backslash is a
// zero byte of x^'\\'.
func jsonEscape(x uint64) uint64 {
	const ones = 0x0101010101010101
	y, bs := x^(0x02*ones), x^('\\'*ones)
	return (y - 0x21*ones) | y | (bs-ones)&^bs
}

// appendJSONContent appends s escaped as slog's JSONHandler does inside
// a string's quotes: control characters, quote and backslash escaped,
// invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped, HTML characters
// left as they are.
func appendJSONContent(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	i, start := 0, 0
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if jsonEscapes[c] == 0 {
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
	return append(b, s[start:]...)
}

// jsonEscapes is 1 for a byte JSON does not take as it is, 0 for the
// others (printable ASCII other than quote and backslash).
var jsonEscapes = func() (t [256]uint8) {
	for c := range t {
		if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			t[c] = 1
		}
	}
	return t
}()

// logSecond is the text of one second of one zone, formatted once for the
// many lines of that second (putLogTime): the line's start up to the
// second, and from the zone to the trace id's opening quote, each in a
// fixed-size array so that it is copied without memmove.
type logSecond struct {
	sec          int64
	loc          *time.Location
	head         [48]byte // {"time":" and 2006-01-02T15:04:05
	tail         [64]byte // Z07:00 and ","level":"INFO","msg":"request","trace_id":"
	headN, tailN int
}

var lastLogSecond atomic.Pointer[logSecond]

// newLogSecond formats t's second. A year has at most twelve digits and
// a zone offset six bytes, so both parts fit their arrays.
func newLogSecond(t time.Time) *logSecond {
	ls := &logSecond{sec: t.Unix(), loc: t.Location()}
	ls.headN = len(t.AppendFormat(append(ls.head[:0], `{"time":"`...), "2006-01-02T15:04:05"))
	ls.tailN = len(append(t.AppendFormat(ls.tail[:0], "Z07:00"), `","level":"INFO","msg":"request","trace_id":"`...))
	return ls
}

// putLogTime writes the line's start to b[j:]: the time as
// t.AppendFormat(b, time.RFC3339Nano) does, with the text around it up to
// the trace id's opening quote. It uses at most 110 bytes of b[j:] (the
// start, a twelve-digit year at most, 36; the fraction 10; the tail's
// array 64).
func putLogTime(b []byte, j int, t time.Time) int {
	ls := lastLogSecond.Load()
	if ls == nil || ls.sec != t.Unix() || ls.loc != t.Location() {
		ls = newLogSecond(t)
		lastLogSecond.Store(ls)
	}
	*(*[48]byte)(b[j:]) = ls.head
	j += ls.headN
	j = putFraction(b, j, t.Nanosecond())
	*(*[64]byte)(b[j:]) = ls.tail
	return j + ls.tailN
}

// putFraction writes "." and the nine digits of ns, a nanosecond, without
// trailing zeros; nothing when ns is 0. It uses ten bytes of b[j:].
func putFraction(b []byte, j, ns int) int {
	if ns == 0 {
		return j
	}
	d := (*[10]byte)(b[j:])
	d[0] = '.'
	u := uint32(ns)
	r := u % 10000000
	putPair(d[1:], u/10000000)
	putPair(d[3:], r/100000)
	r %= 100000
	putPair(d[5:], r/1000)
	r %= 1000
	putPair(d[7:], r/10)
	d[9] = byte('0' + r%10)
	n := 9
	for d[n] == '0' {
		n--
	}
	return j + n + 1
}

// pairs is "00" to "99", two bytes a number.
const pairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

// putPair writes v, below 100, as two digits.
func putPair(d []byte, v uint32) {
	d[0], d[1] = pairs[2*v], pairs[2*v+1]
}

// putInt writes v in decimal as strconv.AppendInt does, the digits'
// count first, then the digits from the last, two at a time. It uses 20
// bytes of b[j:] at most.
func putInt(b []byte, j int, v int64) int {
	if uint64(v) < 10 {
		b[j] = byte('0' + v)
		return j + 1
	}
	if v < 0 {
		return len(strconv.AppendInt(b[:j], v, 10)) // within b's capacity
	}
	u := uint64(v)
	n := decimalLen(u)
	d := b[j : j+n]
	i := n
	for u >= 100 {
		i -= 2
		q := u / 100
		putPair(d[i:], uint32(u-q*100))
		u = q
	}
	if u >= 10 {
		putPair(d[i-2:], uint32(u))
	} else {
		d[i-1] = byte('0' + u)
	}
	return j + n
}

// putStatus writes a status code, three digits as a rule.
func putStatus(b []byte, j int, status int) int {
	if s := uint32(status); s-100 < 900 {
		d := (*[3]byte)(b[j:])
		d[0] = byte('0' + s/100)
		putPair(d[1:], s%100)
		return j + 3
	}
	return putInt(b, j, int64(status))
}

// decimalLen is how many digits u has in decimal: bits.Len64(u)*1233>>12
// is log10 of u's power of two, short by one at most.
func decimalLen(u uint64) int {
	t := bits.Len64(u|1) * 1233 >> 12
	if u < pow10[t] {
		return t
	}
	return t + 1
}

// pow10[i] is 10 to the i.
var pow10 = func() (t [20]uint64) {
	t[0] = 1
	for i := 1; i < len(t); i++ {
		t[i] = t[i-1] * 10
	}
	return t
}()

// putJSONFloat writes f as encoding/json does (slog's JSONHandler calls
// json.Marshal for floats), at most 24 bytes of b[j:].
func putJSONFloat(b []byte, j int, f float64) ([]byte, int) {
	if f >= 0 && f < 1e12 && f >= 1e-6 || f == 0 {
		// A whole number of microseconds in milliseconds (duration_ms):
		// its shortest form is the decimal itself, written without the
		// shortest-float search (the doubles near f are far closer
		// together than 0.001, so no shorter decimal reads back as f).
		if us := math.Round(f * 1000); float64(int64(us))/1000 == f {
			ius := int64(us)
			if ius < 10000 { // under 10 ms, the usual: one digit
				b[j] = byte('0' + ius/1000)
				j++
			} else {
				j = putInt(b, j, ius/1000)
			}
			if frac := int(ius % 1000); frac != 0 {
				d := (*[4]byte)(b[j:])
				d[0], d[1], d[2], d[3] = '.', pairs[2*(frac/10)], pairs[2*(frac/10)+1], byte('0'+frac%10)
				n := 3
				for d[n] == '0' {
					n--
				}
				j += n + 1
			}
			return b, j
		}
	}
	b2 := appendJSONFloat(b[:j], f)
	return b2[:cap(b2)], len(b2)
}

// appendJSONFloat formats f as encoding/json does.
func appendJSONFloat(b []byte, f float64) []byte {
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) || math.IsNaN(f) || math.IsInf(f, 0) {
		// Exponent form and the errors: rare enough for json.Marshal.
		if j, err := json.Marshal(f); err == nil {
			return append(b, j...)
		}
		return append(b, `"!ERROR:invalid float"`...)
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}

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
	full := a.addedLocked()
	a.mu.Unlock()
	if full {
		a.Flush()
	}
	return len(p), nil
}

// addedLocked, under mu after lines were added to the batch, arms the
// flush timer for the batch's first line; true when the batch is full,
// for the caller to flush it once mu is unlocked.
func (a *Log) addedLocked() (full bool) {
	full = len(a.pending) >= batchSize
	if !full && !a.armed {
		a.armed = true
		a.timer.Reset(flushDelay)
	}
	return full
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
