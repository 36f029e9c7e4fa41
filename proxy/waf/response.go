package waf

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
)

// InspectsResponses: InspectResponse reads a response's fields. Safe on
// a nil Tx.
func (t *Tx) InspectsResponses() bool {
	return t != nil && t.p.fw.responses && t.act != actBlocked
}

// InspectResponse runs the response phases on a backend response when the
// Waf section asks for it (InspectResponses): headers, then a text body up
// to MaxResponseBodySize, which is buffered so that Prevention can still
// replace the response with a 403. Safe on a nil Tx; a no-op otherwise.
func (t *Tx) InspectResponse(resp *http.Response) {
	if t == nil || !t.p.fw.responses || t.act == actBlocked {
		return
	}
	tx := t.tx
	for k, vs := range resp.Header {
		for _, v := range vs {
			tx.AddResponseHeader(k, v)
		}
	}
	tx.ProcessResponseHeaders(resp.StatusCode, resp.Proto)
	if t.decideResponse(resp) {
		return
	}
	// A 101's body is the upgraded connection: never read or wrapped.
	hasBody := resp.Body != nil && resp.Body != http.NoBody && resp.StatusCode != http.StatusSwitchingProtocols
	if hasBody && tx.IsResponseBodyAccessible() && tx.IsResponseBodyProcessable() {
		if _, _, err := tx.ReadResponseBodyFrom(resp.Body); err != nil {
			resp.Body = failingBody{err: err, c: resp.Body}
			return
		}
		tx.ProcessResponseBody()
		if t.decideResponse(resp) {
			return
		}
		rbr, err := tx.ResponseBodyReader()
		if err != nil {
			resp.Body = failingBody{err: err, c: resp.Body}
			return
		}
		t.refs.Add(1)
		resp.Body = &forwardBody{Reader: io.MultiReader(rbr, resp.Body), body: resp.Body, t: t}
		return
	}
	tx.ProcessResponseBody()
	t.decideResponse(resp)
}

// decideResponse replaces a response Prevention blocks.
func (t *Tx) decideResponse(resp *http.Response) bool {
	if !t.p.prevent {
		if t.tx.DetectionOnlyInterruption() != nil {
			t.act = actDetected
		}
		if t.tx.Interruption() == nil {
			return false
		}
	}
	it := t.tx.Interruption()
	if it == nil {
		if it = t.tx.DetectionOnlyInterruption(); it == nil {
			return false
		}
	}
	t.act = actBlocked
	rec := &recorder{h: http.Header{}}
	t.answer(rec, it)
	if resp.Body != nil {
		_ = resp.Body.Close()
	}
	resp.StatusCode = rec.status
	resp.Status = strconv.Itoa(rec.status) + " " + http.StatusText(rec.status)
	resp.Header = rec.h
	resp.Trailer = nil
	resp.ContentLength = int64(rec.body.Len())
	resp.Header["Content-Length"] = []string{strconv.Itoa(rec.body.Len())}
	resp.Body = io.NopCloser(&rec.body)
	return true
}

// recorder captures the blocked answer to put it in a response.
type recorder struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) WriteHeader(s int)           { r.status = s }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }

var _ http.ResponseWriter = (*recorder)(nil)
