package dispatch_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xce/xce/dispatch"
	"github.com/xce/xce/netio"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// fsmState is what a refused request must leave alone.
type fsmState struct {
	tasks   int
	applied uint64
	applies int64
}

func stateOf(n *fakeNode) fsmState {
	return fsmState{n.fsm.NumTasks(), n.fsm.AppliedIndex(), n.applies.Load()}
}

// seededPrimary is a serving node holding one task, so an unchanged state is
// not merely an empty one.
func seededPrimary(t *testing.T, lim netio.Limits) (*testServer, fsmState) {
	t.Helper()
	node := newFakeNode("n1", primary)
	node.seed(t, "seeded")
	ts := startServer(t, node, lim)
	return ts, stateOf(node)
}

func checkUnchanged(t *testing.T, n *fakeNode, before fsmState) {
	t.Helper()
	if after := stateOf(n); after != before {
		t.Errorf("state changed: %+v, before %+v", after, before)
	}
}

// postJSON sends a raw Connect JSON request over HTTP/1.1 and returns the
// status and the Connect error code of the body.
func postJSON(t *testing.T, addr, procedure string, body []byte) (int, string, string) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, "http://"+addr+procedure, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("status %d, body %q: %v", resp.StatusCode, raw, err)
	}
	return resp.StatusCode, e.Code, e.Message
}

func TestOversizedRequest(t *testing.T) {
	ts, before := seededPrimary(t, netio.DefaultLimits())
	body := []byte(`{"taskId":"` + strings.Repeat("a", dispatch.MaxRequestBytes) + `"}`)
	status, code, msg := postJSON(t, ts.addr, xcev1connect.ControllerServiceSubmitTaskProcedure, body)
	t.Logf("%d-byte body: HTTP %d, code %q, message %q", len(body), status, code, msg)
	if status != http.StatusTooManyRequests || code != "resource_exhausted" {
		t.Errorf("HTTP %d code %q, want 429 resource_exhausted", status, code)
	}
	checkUnchanged(t, ts.node, before)

	// Just under the limit is read (and then refused as a bad task id).
	body = []byte(`{"taskId":"` + strings.Repeat("a", dispatch.MaxRequestBytes-20) + `"}`)
	status, code, _ = postJSON(t, ts.addr, xcev1connect.ControllerServiceSubmitTaskProcedure, body)
	if status != http.StatusBadRequest || code != "invalid_argument" {
		t.Errorf("body under the limit: HTTP %d code %q, want 400 invalid_argument", status, code)
	}
	checkUnchanged(t, ts.node, before)
}

func TestMalformedJSON(t *testing.T) {
	ts, before := seededPrimary(t, netio.DefaultLimits())
	for _, body := range []string{`{"taskId":`, `{"taskId": 7}`, `{"taskId":"x",}`, `[]`, `not json`} {
		status, code, msg := postJSON(t, ts.addr, xcev1connect.ControllerServiceSubmitTaskProcedure, []byte(body))
		t.Logf("%q: HTTP %d, code %q, message %q", body, status, code, msg)
		if status != http.StatusBadRequest || code != "invalid_argument" {
			t.Errorf("%q: HTTP %d code %q, want 400 invalid_argument", body, status, code)
		}
	}
	checkUnchanged(t, ts.node, before)

	// The same path with a well-formed body works, so the refusals above
	// were about the body.
	status, code, _ := postJSON(t, ts.addr, xcev1connect.ControllerServiceGetTaskProcedure, []byte(`{"taskId":"nope"}`))
	if status != http.StatusNotFound || code != "not_found" {
		t.Errorf("well-formed get: HTTP %d code %q", status, code)
	}
}

func TestReadHeaderTimeout(t *testing.T) {
	lim := netio.DefaultLimits()
	lim.ReadHeaderTimeout = 200 * time.Millisecond
	ts, before := seededPrimary(t, lim)
	// The server starts its clock when it accepts, so start ours before dialing.
	start := time.Now()
	c := dialRaw(t, ts.addr)
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	took := time.Since(start)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("connection still open after %v", took)
	case err == nil: // EOF
		t.Logf("server closed the connection after %v (EOF), sent %q", took, got)
	case errors.Is(err, syscall.ECONNRESET):
		t.Logf("server reset the connection after %v, sent %q", took, got)
	default:
		t.Fatalf("read after %v: %v", took, err)
	}
	if took < lim.ReadHeaderTimeout {
		t.Errorf("closed after %v, before the %v timeout", took, lim.ReadHeaderTimeout)
	}
	checkUnchanged(t, ts.node, before)
}

func TestMaxHeaderBytes(t *testing.T) {
	lim := netio.DefaultLimits()
	ts, before := seededPrimary(t, lim)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, "http://"+ts.addr+xcev1connect.ControllerServiceSubmitTaskProcedure,
		strings.NewReader(`{"taskId":"big"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Big", strings.Repeat("b", 128<<10))
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("128 KiB header with MaxHeaderBytes %d: HTTP %d %q", lim.MaxHeaderBytes, resp.StatusCode, body)
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("HTTP %d, want 431", resp.StatusCode)
	}
	checkUnchanged(t, ts.node, before)
}

// HTTP/2 framing, written by hand (RFC 9113 §4.1) so the test needs nothing
// beyond the standard library.
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4

	settingMaxConcurrentStreams = 0x3

	errCodeProtocol      = 0x1
	errCodeRefusedStream = 0x7
)

type frame struct {
	typ, flags uint8
	stream     uint32
	payload    []byte
}

func writeFrame(t *testing.T, w io.Writer, typ, flags uint8, stream uint32, payload []byte) {
	t.Helper()
	hdr := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(hdr[5:], stream)
	if _, err := w.Write(append(hdr, payload...)); err != nil {
		t.Fatalf("write frame type %d: %v", typ, err)
	}
}

func readFrame(t *testing.T, r io.Reader) frame {
	t.Helper()
	var hdr [9]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		t.Fatalf("read frame: %v", err)
	}
	f := frame{
		typ: hdr[3], flags: hdr[4],
		stream:  binary.BigEndian.Uint32(hdr[5:]) & 0x7fffffff,
		payload: make([]byte, int(hdr[0])<<16|int(hdr[1])<<8|int(hdr[2])),
	}
	if _, err := io.ReadFull(r, f.payload); err != nil {
		t.Fatalf("read frame payload: %v", err)
	}
	return f
}

// hpackInt appends i with an n-bit prefix (RFC 7541 §5.1).
func hpackInt(b []byte, first byte, n uint, i int) []byte {
	max := 1<<n - 1
	if i < max {
		return append(b, first|byte(i))
	}
	b = append(b, first|byte(max))
	for i -= max; i >= 128; i >>= 7 {
		b = append(b, byte(i%128+128))
	}
	return append(b, byte(i))
}

// hpackLiteral encodes headers as literals without indexing, new names, no
// Huffman coding (RFC 7541 §6.2.2): no dynamic table state to get wrong.
func hpackLiteral(kv ...string) []byte {
	var b []byte
	for i := 0; i < len(kv); i += 2 {
		b = append(b, 0)
		b = hpackInt(b, 0, 7, len(kv[i]))
		b = append(b, kv[i]...)
		b = hpackInt(b, 0, 7, len(kv[i+1]))
		b = append(b, kv[i+1]...)
	}
	return b
}

func TestMaxConcurrentStreams(t *testing.T) {
	lim := netio.DefaultLimits()
	lim.MaxConcurrentStreams = 2
	ts, before := seededPrimary(t, lim)
	c := dialRaw(t, ts.addr)
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	writeFrame(t, c, frameSettings, 0, 0, nil)

	// The server's SETTINGS advertises the limit; ack it, so any excess
	// stream is the client's fault, not a race with the settings.
	f := readFrame(t, r)
	if f.typ != frameSettings || f.flags&flagAck != 0 {
		t.Fatalf("first frame: type %d flags %#x, want SETTINGS", f.typ, f.flags)
	}
	advertised := -1
	for p := f.payload; len(p) >= 6; p = p[6:] {
		if binary.BigEndian.Uint16(p) == settingMaxConcurrentStreams {
			advertised = int(binary.BigEndian.Uint32(p[2:]))
		}
	}
	if advertised != 2 {
		t.Fatalf("server advertises SETTINGS_MAX_CONCURRENT_STREAMS %d, want 2", advertised)
	}
	writeFrame(t, c, frameSettings, flagAck, 0, nil)

	// Three WatchStatus calls, request bodies left open: each stream stays
	// active on the server.
	hdrs := hpackLiteral(
		":method", "POST", ":scheme", "http", ":authority", ts.addr,
		":path", xcev1connect.ControllerServiceWatchStatusProcedure,
		"content-type", "application/connect+proto", "connect-protocol-version", "1",
	)
	for _, id := range []uint32{1, 3, 5} {
		writeFrame(t, c, frameHeaders, flagEndHeaders, id, hdrs)
	}
	// The server answers a PING after it has handled every frame before it,
	// so the frames read until the PING's ack are all it has to say about
	// the three HEADERS.
	ping := []byte("xcelimit")
	writeFrame(t, c, framePing, 0, 0, ping)
	resets := map[uint32]uint32{}
	for {
		f := readFrame(t, r)
		if f.typ == frameGoAway {
			t.Fatalf("GOAWAY: last stream %d, code %d", binary.BigEndian.Uint32(f.payload)&0x7fffffff, binary.BigEndian.Uint32(f.payload[4:]))
		}
		if f.typ == frameRSTStream {
			resets[f.stream] = binary.BigEndian.Uint32(f.payload)
		}
		if f.typ == framePing && f.flags&flagAck != 0 && bytes.Equal(f.payload, ping) {
			break
		}
	}
	t.Logf("RST_STREAM frames by stream (1=PROTOCOL_ERROR, 7=REFUSED_STREAM): %v", resets)
	if code, ok := resets[5]; !ok || code != errCodeProtocol {
		t.Errorf("third stream: reset %v with code %d, want PROTOCOL_ERROR (%d)", ok, code, errCodeProtocol)
	}
	if _, ok := resets[1]; ok {
		t.Error("first stream reset")
	}
	if _, ok := resets[3]; ok {
		t.Error("second stream reset")
	}

	// The first stream is alive: end its request (one empty
	// WatchStatusRequest envelope) and the server answers on it.
	writeFrame(t, c, frameData, flagEndStream, 1, []byte{0, 0, 0, 0, 0})
	var gotHeaders, gotData bool
	for !gotData {
		f := readFrame(t, r)
		switch {
		case f.typ == frameRSTStream && f.stream == 1:
			t.Fatalf("stream 1 reset with code %d", binary.BigEndian.Uint32(f.payload))
		case f.typ == frameGoAway:
			t.Fatal("GOAWAY")
		case f.typ == frameHeaders && f.stream == 1:
			gotHeaders = true
		case f.typ == frameData && f.stream == 1 && len(f.payload) > 0:
			gotData = true
		}
	}
	if !gotHeaders {
		t.Error("data on stream 1 without response headers")
	}
	checkUnchanged(t, ts.node, before)
}
