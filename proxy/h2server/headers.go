package h2server

import (
	"errors"
	"strings"

	"github.com/tether-proxy/tether/proxy/internal/h1wire"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// headerBlock is a HEADERS frame and its CONTINUATION frames, decoded:
// what the Framer's MetaHeadersFrame holds, in containers the connection
// reuses from one block to the next (the Framer's cost a dozen
// allocations a block: the frame, its field list as it grows, the
// decoder's callback and what it captures).
type headerBlock struct {
	streamID    uint32
	endStream   bool
	hasPriority bool
	priority    http2.PriorityParam
	fields      []hpack.HeaderField // the pseudo-fields first
	npseudo     int
	// truncated: the list is over the limit; fields holds what came
	// before (the stream is answered 431).
	truncated bool
}

func (b *headerBlock) pseudoValue(name string) string {
	for _, hf := range b.fields[:b.npseudo] {
		if hf.Name[1:] == name {
			return hf.Value
		}
	}
	return ""
}

func (b *headerBlock) regular() []hpack.HeaderField { return b.fields[b.npseudo:] }

// blockDecoder decodes a connection's header blocks with its HPACK
// decoder, as the Framer's ReadMetaHeaders does: the same checks of
// names and values, the same header list limit and the same errors.
type blockDecoder struct {
	dec *hpack.Decoder
	max uint32 // the header list limit
	blk headerBlock
	// The block being decoded: what is left of the limits (fields and
	// the trailers a "trailer" field declares are counted apart, as the
	// Framer counts them), a regular field seen, the first invalid field.
	headersLeft, trailersLeft uint32
	sawRegular                bool
	invalid                   error
}

func newBlockDecoder(max uint32) *blockDecoder {
	d := &blockDecoder{max: max}
	d.dec = hpack.NewDecoder(4096, d.emit)
	d.dec.SetMaxStringLength(int(max))
	return d
}

var (
	errPseudoAfterRegular = errors.New("h2server: pseudo header field after regular")
	errInvalidFieldName   = errors.New("h2server: invalid header field name")
	errInvalidFieldValue  = errors.New("h2server: invalid header field value")
	errPseudoField        = errors.New("h2server: invalid, duplicate or mixed pseudo header fields")
)

func (d *blockDecoder) emit(hf hpack.HeaderField) {
	if !h1wire.ValidFieldValue(hf.Value) {
		d.invalid = errInvalidFieldValue
	}
	if strings.HasPrefix(hf.Name, ":") {
		if d.sawRegular {
			d.invalid = errPseudoAfterRegular
		}
	} else {
		d.sawRegular = true
		if !validWireName(hf.Name) {
			d.invalid = errInvalidFieldName
		}
	}
	if d.invalid != nil {
		d.dec.SetEmitEnabled(false)
		return
	}
	left, size := &d.headersLeft, hf.Size()
	if hf.Name == "trailer" {
		left = &d.trailersLeft
		n := strings.Count(hf.Value, ",") + 1
		size = uint32(len(hf.Value)-n+1) + uint32(n)*hpack.HeaderField{}.Size()
	}
	if size > *left {
		d.dec.SetEmitEnabled(false)
		d.blk.truncated = true
		d.headersLeft, d.trailersLeft = 0, 0
		return
	}
	*left -= size
	if !d.sawRegular {
		d.blk.npseudo++
	}
	d.blk.fields = append(d.blk.fields, hf)
}

// validWireName: a field name as HTTP/2 carries it, a token in lower case.
func validWireName(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		b := v[i]
		if b >= 0x80 || !httpguts.IsTokenRune(rune(b)) || 'A' <= b && b <= 'Z' {
			return false
		}
	}
	return true
}

// read decodes the header block f starts, reading its CONTINUATION frames
// from fr (the Framer holds them to the block's stream, one after
// another). The block is d's until the next call. Errors are the
// Framer's: a http2.ConnectionError, a http2.StreamError for a block
// whose fields are invalid (the dynamic table has taken it whole), or
// fr's read error.
func (d *blockDecoder) read(fr *http2.Framer, f *http2.HeadersFrame) (*headerBlock, error) {
	d.start(f.StreamID, f.StreamEnded(), f.HasPriority(), f.Priority)
	return d.decode(fr, f.HeaderBlockFragment(), f.HeadersEnded())
}

// start begins a block.
func (d *blockDecoder) start(streamID uint32, endStream, hasPriority bool, priority http2.PriorityParam) {
	fields := d.blk.fields[:0]
	if cap(fields) > 64 {
		fields = nil // one large block does not keep its list
	}
	d.blk = headerBlock{streamID: streamID, endStream: endStream, hasPriority: hasPriority,
		priority: priority, fields: fields}
	d.headersLeft, d.trailersLeft = d.max, d.max
	d.sawRegular, d.invalid = false, nil
	d.dec.SetEmitEnabled(true)
}

// decode decodes the started block's first fragment, and its
// CONTINUATION frames' from fr unless ended.
func (d *blockDecoder) decode(fr *http2.Framer, frag []byte, ended bool) (*headerBlock, error) {
	for {
		// A fragment far over what the limit leaves, or any after an
		// invalid field, fails the connection unread.
		if int64(len(frag)) > 2*int64(d.headersLeft+d.trailersLeft) || d.invalid != nil {
			return nil, http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if _, err := d.dec.Write(frag); err != nil {
			return nil, http2.ConnectionError(http2.ErrCodeCompression)
		}
		if ended {
			break
		}
		next, err := fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		cf := next.(*http2.ContinuationFrame) // the Framer's frame order
		frag, ended = cf.HeaderBlockFragment(), cf.HeadersEnded()
	}
	if err := d.dec.Close(); err != nil {
		return nil, http2.ConnectionError(http2.ErrCodeCompression)
	}
	if d.invalid != nil {
		return nil, http2.StreamError{StreamID: d.blk.streamID, Code: http2.ErrCodeProtocol, Cause: d.invalid}
	}
	if !d.checkPseudo() {
		return nil, http2.StreamError{StreamID: d.blk.streamID, Code: http2.ErrCodeProtocol, Cause: errPseudoField}
	}
	return &d.blk, nil
}

// checkPseudo: the pseudo-fields are known ones, none twice, a request's
// or a response's.
func (d *blockDecoder) checkPseudo() bool {
	var req, resp bool
	pf := d.blk.fields[:d.blk.npseudo]
	for i, hf := range pf {
		switch hf.Name {
		case ":method", ":path", ":scheme", ":authority", ":protocol":
			req = true
		case ":status":
			resp = true
		default:
			return false
		}
		for _, hf2 := range pf[:i] {
			if hf.Name == hf2.Name {
				return false
			}
		}
	}
	return !(req && resp)
}
