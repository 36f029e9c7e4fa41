package h2server

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// decodeBoth reads the header block in the frames wire (HEADERS and
// CONTINUATION frames) with the Framer's ReadMetaHeaders and with a
// blockDecoder, both with the header list limit max, and describes each
// outcome: the fields and truncation, or the error's kind and code.
func decodeBoth(wire []byte, max uint32) (framer, own string) {
	fa := http2.NewFramer(nil, bytes.NewReader(wire))
	fa.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fa.MaxHeaderListSize = max
	framer = describe(func() ([]hpack.HeaderField, int, bool, error) {
		f, err := fa.ReadFrame()
		if err != nil {
			return nil, 0, false, err
		}
		mh := f.(*http2.MetaHeadersFrame)
		return mh.Fields, len(mh.PseudoFields()), mh.Truncated, nil
	})
	fb := http2.NewFramer(nil, bytes.NewReader(wire))
	d := newBlockDecoder(max)
	own = describe(func() ([]hpack.HeaderField, int, bool, error) {
		f, err := fb.ReadFrame()
		if err != nil {
			return nil, 0, false, err
		}
		b, err := d.read(fb, f.(*http2.HeadersFrame))
		if err != nil {
			return nil, 0, false, err
		}
		return b.fields, b.npseudo, b.truncated, nil
	})
	return framer, own
}

func describe(read func() ([]hpack.HeaderField, int, bool, error)) string {
	fields, npseudo, truncated, err := read()
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("stream error %v", se.Code)
	case errors.As(err, &ce):
		return fmt.Sprintf("connection error %v", http2.ErrCode(ce))
	case err != nil:
		return "error " + err.Error()
	}
	if len(fields) == 0 {
		fields = nil
	}
	return fmt.Sprintf("%v pseudo=%d truncated=%v", fields, npseudo, truncated)
}

// blockWire is a HEADERS frame on stream 1 carrying the fields' block
// (cut in chunks of split bytes, the rest in CONTINUATION frames).
func blockWire(fields [][2]string, split int) []byte {
	var hb, buf bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range fields {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return blockFrames(&buf, hb.Bytes(), split)
}

func blockFrames(buf *bytes.Buffer, block []byte, split int) []byte {
	fr := http2.NewFramer(buf, nil)
	first := true
	for first || len(block) > 0 {
		n := min(len(block), split)
		frag := block[:n]
		block = block[n:]
		if first {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: frag, EndStream: true, EndHeaders: len(block) == 0})
			first = false
		} else {
			_ = fr.WriteContinuation(1, len(block) == 0, frag)
		}
	}
	return buf.Bytes()
}

// TestBlockDecoderAsFramer: the own header block decoding ends as the
// Framer's ReadMetaHeaders does, block by block: the same fields, the same
// truncation at the limit, the same errors.
func TestBlockDecoderAsFramer(t *testing.T) {
	req := [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "a.example"}, {":path", "/x"}}
	with := func(more ...[2]string) [][2]string { return append(append([][2]string(nil), req...), more...) }
	long := string(bytes.Repeat([]byte("v"), 300))
	tests := []struct {
		name   string
		fields [][2]string
		split  int
		max    uint32
	}{
		{"request", with([2]string{"user-agent", "x"}, [2]string{"cookie", "a=1"}, [2]string{"cookie", "b=2"}), 1 << 10, 1 << 10},
		{"in continuations", with([2]string{"user-agent", "x"}, [2]string{"accept", "*/*"}), 5, 1 << 10},
		{"no fields", nil, 16, 1 << 10},
		{"upper case name", with([2]string{"User-Agent", "x"}), 1 << 10, 1 << 10},
		{"name not a token", with([2]string{"a b", "x"}), 1 << 10, 1 << 10},
		{"empty name", with([2]string{"", "x"}), 1 << 10, 1 << 10},
		{"value with NUL", with([2]string{"x-a", "a\x00b"}), 1 << 10, 1 << 10},
		{"value with LF", with([2]string{"x-a", "a\nb"}), 1 << 10, 1 << 10},
		{"invalid then continuation", with([2]string{"X-A", "x"}, [2]string{"x-b", "y"}), 50, 1 << 10},
		{"pseudo after regular", [][2]string{{":method", "GET"}, {"x-a", "1"}, {":path", "/"}}, 1 << 10, 1 << 10},
		{"unknown pseudo", with([2]string{":foo", "x"}), 1 << 10, 1 << 10},
		{"duplicate pseudo", with([2]string{":path", "/y"}), 1 << 10, 1 << 10},
		{"request and response pseudo", with([2]string{":status", "200"}), 1 << 10, 1 << 10},
		{"response", [][2]string{{":status", "200"}, {"x-a", "1"}}, 1 << 10, 1 << 10},
		{"over the limit", with([2]string{"x-a", long}, [2]string{"x-b", long}), 1 << 10, 600},
		{"far over the limit", with([2]string{"x-a", long}, [2]string{"x-b", long}, [2]string{"x-c", long}), 1 << 10, 200},
		{"far over in continuations", with([2]string{"x-a", long}, [2]string{"x-b", long}, [2]string{"x-c", long}), 100, 300},
		{"trailer counted apart", with([2]string{"trailer", "a, b, c"}, [2]string{"x-a", long}), 1 << 10, 420},
		{"trailer over its own limit", with([2]string{"x-a", "1"}, [2]string{"trailer", long + "," + long}), 1 << 10, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			framer, own := decodeBoth(blockWire(tt.fields, tt.split), tt.max)
			if framer != own {
				t.Errorf("framer: %s\nown:    %s", framer, own)
			}
		})
	}
	t.Run("compression error", func(t *testing.T) {
		var buf bytes.Buffer
		framer, own := decodeBoth(blockFrames(&buf, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 1<<10), 1<<10)
		if framer != own || !reflect.DeepEqual(own, "connection error COMPRESSION_ERROR") {
			t.Errorf("framer: %s\nown:    %s", framer, own)
		}
	})
}

// FuzzBlockDecoder: any header block, whole or cut in CONTINUATION
// frames, ends as the Framer's ReadMetaHeaders ends it.
func FuzzBlockDecoder(f *testing.F) {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, hf := range [][2]string{{":method", "GET"}, {":path", "/"}, {"cookie", "a=b"}, {"Bad", "x"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
	}
	f.Add(hb.Bytes(), uint8(7), uint16(100))
	f.Add([]byte{0x82, 0x84, 0x86}, uint8(1), uint16(1000))
	f.Fuzz(func(t *testing.T, block []byte, split uint8, max uint16) {
		var buf bytes.Buffer
		framer, own := decodeBoth(blockFrames(&buf, block, int(split)+1), uint32(max)+1)
		if framer != own {
			t.Errorf("framer: %s\nown:    %s", framer, own)
		}
	})
}
