package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tether-proxy/tether/proxy/config"
)

// gRPC through tether, end to end with grpc-go on both sides: the client
// talks HTTP/2 to a tether listener (h2c with Kestrel's Protocols Http2, or
// h2 over TLS), tether talks h2c to the backend (HttpRequest.Version 2,
// RequestVersionExact). A generic service with a bytes codec avoids
// generated code.

// rawCodecV2 passes messages as bytes (*[]byte).
type rawCodecV2 struct{}

func (rawCodecV2) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
}

func (rawCodecV2) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: %T", v)
	}
	*b = data.Materialize()
	return nil
}

func (rawCodecV2) Name() string { return "raw" }

// echoService: Unary echoes with a trailer, or fails with the status the
// request names; Bidi echoes every message; Wait blocks until its deadline
// and reports whether it had one.
var echoService = grpc.ServiceDesc{
	ServiceName: "tether.test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Unary",
		Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			if string(in) == "fail" {
				_ = grpc.SetTrailer(ctx, metadata.Pairs("x-why", "asked to"))
				return nil, status.Error(codes.FailedPrecondition, "failing as asked")
			}
			_ = grpc.SetHeader(ctx, metadata.Pairs("x-header", "h"))
			_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t"))
			out := append([]byte("echo:"), in...)
			return &out, nil
		},
	}, {
		MethodName: "Wait",
		Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			if _, ok := ctx.Deadline(); !ok {
				return nil, status.Error(codes.InvalidArgument, "no deadline reached the backend")
			}
			<-ctx.Done()
			return nil, status.FromContextError(ctx.Err()).Err()
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Bidi",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			for {
				var in []byte
				if err := stream.RecvMsg(&in); errors.Is(err, io.EOF) {
					stream.SetTrailer(metadata.Pairs("x-count", "done"))
					return nil
				} else if err != nil {
					return err
				}
				out := append([]byte("echo:"), in...)
				if err := stream.SendMsg(&out); err != nil {
					return err
				}
			}
		},
	}},
}

func startGRPCBackend(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawCodecV2{}))
	srv.RegisterService(&echoService, nil)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return "http://" + ln.Addr().String()
}

func TestGRPCThroughTether(t *testing.T) {
	backend := startGRPCBackend(t)
	cfg := mustParse(t, simpleConfig(map[string]string{"d1": backend},
		`"HttpRequest": {"Version": "2", "VersionPolicy": "RequestVersionExact"}`, "", ""))
	h := newHarness(t, cfg, nil)

	front := func(t *testing.T, l config.Listener) string {
		s := startServer(t, &config.Config{Listeners: []config.Listener{l}}, h.p)
		return s.Addrs()[0].String()
	}
	h2c := config.Listener{Address: "127.0.0.1:0"}
	h2c.Protocols = config.ProtocolsHttp2
	tlsL := config.Listener{Address: "127.0.0.1:0"}
	tlsL.SelfSigned = true

	for _, c := range []struct {
		desc  string
		l     config.Listener
		creds credentials.TransportCredentials
	}{
		{"h2c listener (Kestrel Protocols Http2)", h2c, insecure.NewCredentials()},
		{"TLS listener, h2 by ALPN", tlsL, credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})}, //nolint:gosec // self-signed test listener
	} {
		t.Run(c.desc, func(t *testing.T) {
			conn, err := grpc.NewClient(front(t, c.l), grpc.WithTransportCredentials(c.creds),
				grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodecV2{})))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			t.Run("unary with headers and trailers", func(t *testing.T) {
				in, out := []byte("hi"), []byte(nil)
				var header, trailer metadata.MD
				if err := conn.Invoke(ctx, "/tether.test.Echo/Unary", &in, &out, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
					t.Fatal(err)
				}
				if string(out) != "echo:hi" || header.Get("x-header")[0] != "h" || len(trailer.Get("x-trailer")) != 1 || trailer.Get("x-trailer")[0] != "t" {
					t.Fatalf("out %q header %v trailer %v", out, header, trailer)
				}
			})
			t.Run("an error status and its trailer reach the client", func(t *testing.T) {
				in, out := []byte("fail"), []byte(nil)
				var trailer metadata.MD
				err := conn.Invoke(ctx, "/tether.test.Echo/Unary", &in, &out, grpc.Trailer(&trailer))
				if s := status.Convert(err); s.Code() != codes.FailedPrecondition || s.Message() != "failing as asked" || len(trailer.Get("x-why")) != 1 {
					t.Fatalf("status %v, trailer %v", s, trailer)
				}
			})
			t.Run("bidirectional streaming", func(t *testing.T) {
				stream, err := conn.NewStream(ctx, &grpc.StreamDesc{StreamName: "Bidi", ServerStreams: true, ClientStreams: true}, "/tether.test.Echo/Bidi")
				if err != nil {
					t.Fatal(err)
				}
				for i := range 5 {
					msg := fmt.Appendf(nil, "m%d", i)
					if err := stream.SendMsg(&msg); err != nil {
						t.Fatal(err)
					}
					var got []byte
					if err := stream.RecvMsg(&got); err != nil {
						t.Fatal(err)
					}
					if want := "echo:" + string(msg); string(got) != want {
						t.Fatalf("got %q, want %q", got, want)
					}
				}
				if err := stream.CloseSend(); err != nil {
					t.Fatal(err)
				}
				var extra []byte
				if err := stream.RecvMsg(&extra); !errors.Is(err, io.EOF) {
					t.Fatalf("end of stream: %v", err)
				}
				if tr := stream.Trailer(); len(tr.Get("x-count")) != 1 {
					t.Fatalf("stream trailer %v", tr)
				}
			})
			t.Run("the deadline reaches the backend and ends the call", func(t *testing.T) {
				dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer dcancel()
				in, out := []byte("x"), []byte(nil)
				err := conn.Invoke(dctx, "/tether.test.Echo/Wait", &in, &out)
				if s := status.Convert(err); s.Code() != codes.DeadlineExceeded {
					t.Fatalf("status %v, want DeadlineExceeded", s)
				}
			})
		})
	}
}

// TestGRPCErrorsAreGRPCStatuses: a gRPC client that tether cannot serve
// reads a gRPC status (not "unexpected content-type"), and the access log
// keeps the HTTP status.
func TestGRPCErrorsAreGRPCStatuses(t *testing.T) {
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": "http://" + deadAddr(t)}, "", "", "")), nil)
	conn, err := grpc.NewClient(h2cFront(t, h), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodecV2{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, out := []byte("x"), []byte(nil)
	err = conn.Invoke(ctx, "/tether.test.Echo/Unary", &in, &out)
	if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "bad gateway" {
		t.Fatalf("status %v, want UNAVAILABLE \"bad gateway\"", st)
	}
	if lines := h.accessLines(t); len(lines) != 1 || lines[0]["status"] != 502.0 {
		t.Fatalf("access log %v, want status 502", lines)
	}
}

// TestGRPCTimeoutBoundsTheCall: a backend that ignores its deadline is cut
// at the call's grpc-timeout; the client reads DEADLINE_EXCEEDED from
// tether and the backend's request is released. (A raw HTTP/2 client sends
// the header, so no client-side timer answers in tether's place.)
func TestGRPCTimeoutBoundsTheCall(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	released := make(chan struct{}, 1)
	stuck := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		// net/http sees the connection close (and ends the context) only
		// once the body was read.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-hang:
		case <-r.Context().Done():
			released <- struct{}{}
		}
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": stuck.URL}, "", "", "")), nil)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
	req, _ := http.NewRequest("POST", "http://"+h2cFront(t, h)+"/tether.test.Echo/Unary", strings.NewReader("\x00\x00\x00\x00\x01x"))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("Grpc-Timeout", "300m")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/grpc" ||
		resp.Header.Get("Grpc-Status") != "4" || resp.Header.Get("Grpc-Message") != "gateway timeout" {
		t.Fatalf("answer %d %v", resp.StatusCode, resp.Header)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("answered after %v, before the call's deadline", el)
	}
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend's request was not released at the deadline")
	}
	if lines := h.accessLines(t); len(lines) != 1 || lines[0]["status"] != 504.0 {
		t.Fatalf("access log %v, want status 504", lines)
	}
}

// h2cFront serves h's proxy on an h2c listener (Kestrel's Protocols Http2).
func h2cFront(t *testing.T, h *harness) string {
	t.Helper()
	l := config.Listener{Address: "127.0.0.1:0"}
	l.Protocols = config.ProtocolsHttp2
	return startServer(t, &config.Config{Listeners: []config.Listener{l}}, h.p).Addrs()[0].String()
}
