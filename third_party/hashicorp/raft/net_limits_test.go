package raft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// newLimitTransport is a TCP NetworkTransport on localhost with cfg's
// limits.
func newLimitTransport(t *testing.T, cfg NetworkTransportConfig) *NetworkTransport {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = newTestLogger(t)
	}
	if cfg.MaxPool == 0 {
		cfg.MaxPool = 2
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	trans, err := NewTCPTransportWithConfig("127.0.0.1:0", nil, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = trans.Close() })
	return trans
}

// serve answers every RPC trans receives with answer, and counts them.
func serve(t *testing.T, trans *NetworkTransport, answer func(rpc RPC)) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		for {
			select {
			case rpc := <-trans.Consumer():
				n.Add(1)
				if rpc.Reader != nil {
					_, _ = io.Copy(io.Discard, rpc.Reader)
				}
				answer(rpc)
			case <-stop:
				return
			}
		}
	}()
	return &n
}

// answerOK answers each RPC with an empty response of its kind.
func answerOK(rpc RPC) { rpc.Respond(emptyResponseTo(rpc.Command), nil) }

// waitClosed reads c until the peer closes it and returns how long that
// took; it fails the test if c stays open for d.
func waitClosed(t *testing.T, c net.Conn, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(d))
	var b [4096]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			if isTimeout(err) {
				t.Fatalf("connection still open after %s", d)
			}
			return time.Since(start)
		}
	}
}

func stats(trans *NetworkTransport) TransportStats { return trans.TransportStats() }

// A request carrying a term no node may hold is answered with an error
// and never reaches raft; the connection keeps serving.
func TestNetworkTransport_RefusesBadTermsOnTheWire(t *testing.T) {
	server := newLimitTransport(t, NetworkTransportConfig{})
	got := serve(t, server, answerOK)
	client := newLimitTransport(t, NetworkTransportConfig{})
	addr := server.LocalAddr()
	hdr := RPCHeader{ProtocolVersion: ProtocolVersionMax, ID: []byte("intruder"), Addr: []byte(client.LocalAddr())}
	const huge = math.MaxUint64

	checkRefused := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "term") {
			t.Errorf("%s: got %v, want an error naming the term", what, err)
		}
	}
	var ar AppendEntriesResponse
	checkRefused("AppendEntries term", client.AppendEntries("s", addr, &AppendEntriesRequest{RPCHeader: hdr, Term: huge}, &ar))
	checkRefused("AppendEntries PrevLogTerm", client.AppendEntries("s", addr, &AppendEntriesRequest{RPCHeader: hdr, Term: 3, PrevLogEntry: 1, PrevLogTerm: huge}, &ar))
	checkRefused("AppendEntries entry term", client.AppendEntries("s", addr, &AppendEntriesRequest{RPCHeader: hdr, Term: 3,
		Entries: []*Log{{Index: 1, Term: 3}, {Index: 2, Term: huge}}}, &ar))
	var vr RequestVoteResponse
	checkRefused("RequestVote", client.RequestVote("s", addr, &RequestVoteRequest{RPCHeader: hdr, Term: huge, LastLogTerm: huge}, &vr))
	checkRefused("RequestVote LastLogTerm", client.RequestVote("s", addr, &RequestVoteRequest{RPCHeader: hdr, Term: 3, LastLogTerm: MaxTerm}, &vr))
	var pr RequestPreVoteResponse
	checkRefused("RequestPreVote", client.RequestPreVote("s", addr, &RequestPreVoteRequest{RPCHeader: hdr, Term: huge}, &pr))
	var sr InstallSnapshotResponse
	data := bytes.NewReader(make([]byte, 1<<10))
	err := client.InstallSnapshot("s", addr, &InstallSnapshotRequest{RPCHeader: hdr, SnapshotVersion: 1, Term: 3, LastLogTerm: huge, Size: 1 << 10}, &sr, data)
	if err == nil {
		t.Error("InstallSnapshot with a huge LastLogTerm succeeded")
	}
	if n := got.Load(); n != 0 {
		t.Errorf("%d refused requests reached the consumer", n)
	}
	if s := stats(server); s.BadTerm != 7 {
		t.Errorf("server stats %+v, want 7 bad terms", s)
	}
	// The transport keeps serving, on the pooled connections too.
	for i := 0; i < 3; i++ {
		if err := client.AppendEntries("s", addr, &AppendEntriesRequest{RPCHeader: hdr, Term: 3}, &ar); err != nil {
			t.Fatalf("a valid request after the refusals: %v", err)
		}
	}
}

// A response carrying a term no node may hold is an RPC error, and the
// caller sees nothing of it.
func TestNetworkTransport_RefusesBadTermInResponse(t *testing.T) {
	server := newLimitTransport(t, NetworkTransportConfig{})
	serve(t, server, func(rpc RPC) {
		switch rpc.Command.(type) {
		case *AppendEntriesRequest:
			rpc.Respond(&AppendEntriesResponse{Term: math.MaxUint64, Success: true}, nil)
		case *RequestVoteRequest:
			rpc.Respond(&RequestVoteResponse{Term: MaxTerm, Granted: true}, nil)
		default:
			answerOK(rpc)
		}
	})
	client := newLimitTransport(t, NetworkTransportConfig{})
	var ar AppendEntriesResponse
	err := client.AppendEntries("s", server.LocalAddr(), &AppendEntriesRequest{Term: 3}, &ar)
	if err == nil || !strings.Contains(err.Error(), "term") {
		t.Errorf("AppendEntries: %v", err)
	}
	if ar.Term != 0 || ar.Success {
		t.Errorf("refused response left in place: %+v", ar)
	}
	var vr RequestVoteResponse
	if err := client.RequestVote("s", server.LocalAddr(), &RequestVoteRequest{Term: 3}, &vr); err == nil || vr.Granted {
		t.Errorf("RequestVote: %v %+v", err, vr)
	}
	if s := stats(client); s.BadTerm != 2 {
		t.Errorf("client stats %+v, want 2 bad terms", s)
	}

	// Pipelined responses too.
	p, err := client.AppendEntriesPipeline("s", server.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	if _, err := p.AppendEntries(&AppendEntriesRequest{Term: 3}, new(AppendEntriesResponse)); err != nil {
		t.Fatal(err)
	}
	f := <-p.Consumer()
	if f.Error() == nil || f.Response().Term != 0 {
		t.Errorf("pipelined response: %v %+v", f.Error(), f.Response())
	}
}

// startTCPRafts starts n bootstrapped rafts on TCP transports with cfg's
// limits and waits for a leader.
func startTCPRafts(t *testing.T, n int, cfg NetworkTransportConfig) ([]*Raft, []*NetworkTransport, []*MockFSM) {
	t.Helper()
	var transports []*NetworkTransport
	var conf Configuration
	for i := 0; i < n; i++ {
		trans := newLimitTransport(t, cfg)
		transports = append(transports, trans)
		conf.Servers = append(conf.Servers, Server{ID: ServerID(fmt.Sprintf("s%d", i)), Address: trans.LocalAddr()})
	}
	var rafts []*Raft
	var fsms []*MockFSM
	for i := 0; i < n; i++ {
		c := inmemConfig(t)
		c.HeartbeatTimeout = 100 * time.Millisecond
		c.ElectionTimeout = 100 * time.Millisecond
		c.LeaderLeaseTimeout = 100 * time.Millisecond
		c.LocalID = conf.Servers[i].ID
		store := NewInmemStore()
		snaps := NewInmemSnapshotStore()
		if err := BootstrapCluster(c, store, store, snaps, transports[i], conf); err != nil {
			t.Fatal(err)
		}
		fsm := &MockFSM{}
		r, err := NewRaft(c, fsm, store, store, snaps, transports[i])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Shutdown().Error() })
		rafts = append(rafts, r)
		fsms = append(fsms, fsm)
	}
	pollFor(t, 10*time.Second, "a leader", func() bool { return leaderOf(rafts) != nil })
	return rafts, transports, fsms
}

func leaderOf(rafts []*Raft) *Raft {
	for _, r := range rafts {
		if r.State() == Leader {
			return r
		}
	}
	return nil
}

// A peer sends vote requests and entries of the largest term to a
// running node: each is refused, the node keeps its term and its
// leadership, and serves writes.
func TestRaft_HugeTermFromTheWireRefused(t *testing.T) {
	rafts, transports, _ := startTCPRafts(t, 1, NetworkTransportConfig{})
	r := rafts[0]
	if err := r.Apply([]byte("before"), 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	term := r.CurrentTerm()
	intruder := newLimitTransport(t, NetworkTransportConfig{})
	hdr := RPCHeader{ProtocolVersion: ProtocolVersionMax, ID: []byte("intruder"), Addr: []byte(intruder.LocalAddr())}
	addr := transports[0].LocalAddr()
	const huge = math.MaxUint64
	var vr RequestVoteResponse
	if err := intruder.RequestVote("s0", addr, &RequestVoteRequest{RPCHeader: hdr, Term: huge, LastLogIndex: huge, LastLogTerm: huge}, &vr); err == nil {
		t.Errorf("vote request at term 2^64-1 answered: %+v", vr)
	}
	var pr RequestPreVoteResponse
	if err := intruder.RequestPreVote("s0", addr, &RequestPreVoteRequest{RPCHeader: hdr, Term: huge, LastLogIndex: huge, LastLogTerm: huge}, &pr); err == nil {
		t.Errorf("pre-vote request at term 2^64-1 answered: %+v", pr)
	}
	var ar AppendEntriesResponse
	if err := intruder.AppendEntries("s0", addr, &AppendEntriesRequest{RPCHeader: hdr, Term: huge, PrevLogEntry: 1, PrevLogTerm: 1}, &ar); err == nil {
		t.Errorf("appendEntries at term 2^64-1 answered: %+v", ar)
	}
	if err := intruder.AppendEntries("s0", addr, &AppendEntriesRequest{RPCHeader: hdr, Term: huge}, &ar); err == nil {
		t.Errorf("heartbeat at term 2^64-1 answered: %+v", ar)
	}
	if got := r.CurrentTerm(); got != term {
		t.Errorf("term %d, was %d", got, term)
	}
	if r.State() != Leader {
		t.Errorf("state %v", r.State())
	}
	if err := r.Apply([]byte("after"), 5*time.Second).Error(); err != nil {
		t.Fatalf("apply after the intruder: %v", err)
	}
	if s := stats(transports[0]); s.BadTerm != 4 {
		t.Errorf("stats %+v, want 4 bad terms", s)
	}
}

// appendEntriesPrefix is the start of an AppendEntries request on the wire
// up to the Data of its first entry.
var appendEntriesPrefix = []byte{rpcAppendEntries,
	0x81, 0xa7, 'E', 'n', 't', 'r', 'i', 'e', 's', // {"Entries":
	0x91,                           // [
	0x81, 0xa4, 'D', 'a', 't', 'a'} // {"Data":

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// A request that declares a value larger than MaxRPCSize is refused at
// the declaration, before anything is allocated for it: the connection is
// closed while the sender is still writing, and the heap does not grow.
func TestNetworkTransport_OversizedRPCRefusedBeforeItIsRead(t *testing.T) {
	server := newLimitTransport(t, NetworkTransportConfig{MaxRPCSize: 1 << 20})
	got := serve(t, server, answerOK)
	const declared = 1 << 30
	cases := map[string][]byte{
		"bin32": append(append([]byte{}, appendEntriesPrefix...), append([]byte{0xc6}, be32(declared)...)...),
		"str32": append(append([]byte{}, appendEntriesPrefix...), append([]byte{0xdb}, be32(declared)...)...),
		// An unknown field, which the decoder skips by reading it.
		"ext32":   append([]byte{rpcAppendEntries, 0x81, 0xa3, 'Z', 'z', 'z', 0xc9}, be32(declared)...),
		"array32": append([]byte{rpcAppendEntries, 0x81, 0xa7, 'E', 'n', 't', 'r', 'i', 'e', 's', 0xdd}, be32(declared)...),
		"map32":   append([]byte{rpcRequestVote, 0xdf}, be32(declared)...),
	}
	zeros := make([]byte, 1<<20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	want := uint64(0)
	for name, frame := range cases {
		c, err := net.Dial("tcp", string(server.LocalAddr()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(frame); err != nil {
			t.Fatal(err)
		}
		// Keep sending what the header promised, as a peer would.
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 64; i++ {
				if _, err := c.Write(zeros); err != nil {
					return
				}
			}
		}()
		waitClosed(t, c, 5*time.Second)
		_ = c.Close()
		wg.Wait()
		want++
		pollFor(t, 5*time.Second, name+" refused", func() bool { return stats(server).TooLarge == want })
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.TotalAlloc - before.TotalAlloc); grew > 16<<20 {
		t.Errorf("%d bytes allocated while refusing %d declared GiB", grew, len(cases))
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 8<<20 {
		t.Errorf("heap grew by %d bytes", grew)
	}
	if n := got.Load(); n != 0 {
		t.Errorf("%d oversized requests reached the consumer", n)
	}
}

// A request over MaxRPCSize that declares nothing false (many entries of a
// size each within the limit) is refused once the limit is read: the
// sender gets an error, nothing reaches raft, and the transport serves on.
func TestNetworkTransport_OversizedRPCRefused(t *testing.T) {
	server := newLimitTransport(t, NetworkTransportConfig{MaxRPCSize: 1 << 20})
	got := serve(t, server, answerOK)
	client := newLimitTransport(t, NetworkTransportConfig{})
	req := &AppendEntriesRequest{Term: 3}
	for i := 0; i < 64; i++ {
		req.Entries = append(req.Entries, &Log{Index: uint64(i + 1), Term: 3, Data: make([]byte, 256<<10)})
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var resp AppendEntriesResponse
	if err := client.AppendEntries("s", server.LocalAddr(), req, &resp); err == nil {
		t.Fatal("a 16 MiB AppendEntries went through a 1 MiB limit")
	}
	pollFor(t, 5*time.Second, "the refusal", func() bool { return stats(server).TooLarge == 1 })
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 8<<20 {
		t.Errorf("heap grew by %d bytes", grew)
	}
	if n := got.Load(); n != 0 {
		t.Errorf("%d requests reached the consumer", n)
	}
	if err := client.AppendEntries("s", server.LocalAddr(), &AppendEntriesRequest{Term: 3}, &resp); err != nil {
		t.Fatalf("a small request after the refusal: %v", err)
	}
}

// A response over the caller's MaxRPCSize is an error.
func TestNetworkTransport_OversizedResponseRefused(t *testing.T) {
	server := newLimitTransport(t, NetworkTransportConfig{})
	serve(t, server, func(rpc RPC) { rpc.Respond(&RequestVoteResponse{Term: 1, Peers: make([]byte, 1<<20)}, nil) })
	client := newLimitTransport(t, NetworkTransportConfig{MaxRPCSize: 64 << 10})
	var resp RequestVoteResponse
	if err := client.RequestVote("s", server.LocalAddr(), &RequestVoteRequest{Term: 1}, &resp); err == nil {
		t.Fatal("a 1 MiB response went through a 64 KiB limit")
	}
	if s := stats(client); s.TooLarge != 1 {
		t.Errorf("client stats %+v", s)
	}
}

// The guard passes what fits and refuses, at the header, what declares
// more than is left.
func TestRPCGuard(t *testing.T) {
	// A real request passes unchanged.
	var buf bytes.Buffer
	enc := codec.NewEncoder(&buf, &codec.MsgpackHandle{BasicHandle: codec.BasicHandle{TimeNotBuiltin: true}})
	req := &AppendEntriesRequest{Term: 9, Entries: []*Log{{Index: 1, Term: 9, Data: []byte("hello"), Extensions: []byte("x"), AppendedAt: time.Now()}}}
	if err := enc.Encode(req); err != nil {
		t.Fatal(err)
	}
	wire := buf.Bytes()
	g := &rpcGuard{r: bytes.NewReader(wire)}
	g.reset(int64(len(wire)))
	var out AppendEntriesRequest
	if err := codec.NewDecoder(g, &codec.MsgpackHandle{}).Decode(&out); err != nil {
		t.Fatalf("decode within an exact limit: %v", err)
	}
	if out.Term != 9 || len(out.Entries) != 1 || string(out.Entries[0].Data) != "hello" {
		t.Fatalf("decoded %+v", out)
	}
	// One byte less is too large.
	g = &rpcGuard{r: bytes.NewReader(wire)}
	g.reset(int64(len(wire) - 1))
	if err := codec.NewDecoder(g, &codec.MsgpackHandle{}).Decode(&out); err == nil || g.err == nil {
		t.Fatalf("decode over the limit: %v (guard %v)", err, g.err)
	}
	// A header is withheld: the reader gets everything before its last
	// byte.
	frame := append([]byte{0xc6}, be32(100)...)
	g = &rpcGuard{r: bytes.NewReader(frame)}
	g.reset(50)
	b, err := io.ReadAll(g)
	var tooLarge *errRPCTooLarge
	if !errors.As(err, &tooLarge) || len(b) != 4 {
		t.Fatalf("read %d bytes, %v", len(b), err)
	}
	// Too many containers.
	many := []byte{0xdd}
	many = append(many, be32(maxRPCContainers+1)...)
	for i := 0; i <= maxRPCContainers; i++ {
		many = append(many, 0x90)
	}
	g = &rpcGuard{r: bytes.NewReader(many)}
	g.reset(1 << 20)
	if _, err := io.ReadAll(g); !errors.As(err, &tooLarge) {
		t.Fatalf("%d arrays: %v", maxRPCContainers+1, err)
	}
}

// A connection that sends nothing is closed after IdleTimeout.
func TestNetworkTransport_SilentConnClosed(t *testing.T) {
	server := newLimitTransport(t, NetworkTransportConfig{IdleTimeout: 200 * time.Millisecond})
	c, err := net.Dial("tcp", string(server.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if took := waitClosed(t, c, 5*time.Second); took < 150*time.Millisecond {
		t.Errorf("closed after %s, before the idle timeout", took)
	}
	pollFor(t, 5*time.Second, "the idle refusal", func() bool { return stats(server).Idle == 1 })
}

// An RPC that starts and does not finish within RPCTimeout is cut off;
// one whose sender hangs up in the middle is counted as malformed.
func TestNetworkTransport_SlowAndTruncatedRPCs(t *testing.T) {
	server := newLimitTransport(t, NetworkTransportConfig{RPCTimeout: 200 * time.Millisecond, IdleTimeout: time.Minute})
	got := serve(t, server, answerOK)

	slow, err := net.Dial("tcp", string(server.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = slow.Close() }()
	if _, err := slow.Write(appendEntriesPrefix[:8]); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, slow, 5*time.Second)
	pollFor(t, 5*time.Second, "the slow refusal", func() bool { return stats(server).Slow == 1 })

	cut, err := net.Dial("tcp", string(server.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cut.Write(appendEntriesPrefix[:8]); err != nil {
		t.Fatal(err)
	}
	_ = cut.Close()
	pollFor(t, 5*time.Second, "the truncated rpc", func() bool { return stats(server).Malformed == 1 })

	garbage, err := net.Dial("tcp", string(server.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = garbage.Close() }()
	if _, err := garbage.Write([]byte{42, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, garbage, 5*time.Second)
	pollFor(t, 5*time.Second, "the unknown rpc type", func() bool { return stats(server).Malformed == 2 })
	if n := got.Load(); n != 0 {
		t.Errorf("%d requests reached the consumer", n)
	}
}

// Beyond MaxInboundConns, when every open connection has carried an RPC,
// a connection is accepted and closed at once; once connections close,
// new ones are served again.
func TestNetworkTransport_ConnectionCap(t *testing.T) {
	const limit = 8
	server := newLimitTransport(t, NetworkTransportConfig{MaxInboundConns: limit})
	serve(t, server, answerOK)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	for i := 0; i < limit; i++ {
		c := dialRaw(t, server)
		rawRPC(t, c)
		held = append(held, c)
	}
	pollFor(t, 5*time.Second, "the connections to be accepted", func() bool { return server.inbound.len() == limit })

	const flood = 200
	for i := 0; i < flood; i++ {
		c := dialRefused(t, server)
		waitClosed(t, c, 5*time.Second)
		_ = c.Close()
	}
	if s := stats(server); s.TooManyConnections != flood || s.Evicted != 0 {
		t.Errorf("stats %+v, want %d connections refused and none evicted", s, flood)
	}
	if n := server.inbound.len(); n != limit {
		t.Errorf("%d inbound connections open", n)
	}
	for _, c := range held {
		rawRPC(t, c)
	}

	for _, c := range held {
		_ = c.Close()
	}
	held = nil
	pollFor(t, 5*time.Second, "the held connections to end", func() bool { return server.inbound.len() == 0 })
	client := newLimitTransport(t, NetworkTransportConfig{})
	var resp AppendEntriesResponse
	if err := client.AppendEntries("s", server.LocalAddr(), &AppendEntriesRequest{Term: 1}, &resp); err != nil {
		t.Fatalf("an rpc after the flood: %v", err)
	}
}

// dialRaw opens a TCP connection to trans and waits until trans has
// accepted it, so that connections dialled one after another are accepted
// in that order.
func dialRaw(t *testing.T, trans *NetworkTransport) net.Conn {
	t.Helper()
	before := trans.inbound.acceptedCount()
	c, err := net.Dial("tcp", string(trans.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	pollFor(t, 5*time.Second, "the connection to be accepted", func() bool { return trans.inbound.acceptedCount() > before })
	return c
}

// dialRefused opens a TCP connection to trans, which is to refuse it.
func dialRefused(t *testing.T, trans *NetworkTransport) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", string(trans.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// acceptedCount is how many connections the set has admitted.
func (s *inboundSet) acceptedCount() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// countIn is how many open connections are in state.
func (s *inboundSet) countIn(state inboundState) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		if c.state == state {
			n++
		}
	}
	return n
}

// rawRPC sends a RequestVote on c, as a peer's transport would, and reads
// its answer.
func rawRPC(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	var buf bytes.Buffer
	buf.WriteByte(rpcRequestVote)
	if err := codec.NewEncoder(&buf, &codec.MsgpackHandle{}).Encode(&RequestVoteRequest{Term: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(buf.Bytes()); err != nil {
		t.Fatalf("send an rpc: %v", err)
	}
	dec := codec.NewDecoder(c, &codec.MsgpackHandle{})
	var rpcErr string
	var resp RequestVoteResponse
	if err := dec.Decode(&rpcErr); err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	if err := dec.Decode(&resp); err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	if rpcErr != "" {
		t.Fatalf("rpc error %q", rpcErr)
	}
}

// assertOpen fails the test if the peer has closed c (or sent anything).
func assertOpen(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	var b [1]byte
	if _, err := c.Read(b[:]); !isTimeout(err) {
		t.Fatalf("%s: closed or read from (%v), want it open", what, err)
	}
}

// FirstByteTimeout and its defaults.
func TestNetworkTransport_FirstByteTimeoutDefaults(t *testing.T) {
	for _, c := range []struct {
		set, want time.Duration
	}{{0, DefaultFirstByteTimeout}, {-1, -1}, {time.Second, time.Second}} {
		trans := newLimitTransport(t, NetworkTransportConfig{FirstByteTimeout: c.set})
		if trans.firstByteTimeout != c.want {
			t.Errorf("FirstByteTimeout %s: got %s, want %s", c.set, trans.firstByteTimeout, c.want)
		}
	}
}

// A connection that begins no RPC within FirstByteTimeout of its accept is
// closed and counted; one that began an RPC at once stays, serving, until
// its IdleTimeout.
func TestNetworkTransport_FirstByteTimeout(t *testing.T) {
	server := newLimitTransport(t, NetworkTransportConfig{FirstByteTimeout: 200 * time.Millisecond, IdleTimeout: time.Minute})
	got := serve(t, server, answerOK)
	used := dialRaw(t, server)
	rawRPC(t, used)
	silent := dialRaw(t, server)
	if took := waitClosed(t, silent, 5*time.Second); took < 150*time.Millisecond {
		t.Errorf("closed after %s, before the first-byte timeout", took)
	}
	pollFor(t, 5*time.Second, "the first-byte refusal", func() bool { return stats(server).FirstByte == 1 })
	// used has been open longer than the first-byte timeout.
	assertOpen(t, used, "the connection that carried an rpc")
	rawRPC(t, used)
	if s := stats(server); s.Total() != 1 {
		t.Errorf("stats %+v, want one first-byte refusal only", s)
	}
	if n := got.Load(); n != 2 {
		t.Errorf("%d rpcs served, want 2", n)
	}
}

// At MaxInboundConns a new connection takes the place of the oldest one
// that has begun no RPC; those that carried one stay. Once all have, the
// new one is refused.
func TestNetworkTransport_CapEvictsOldestSilentConn(t *testing.T) {
	const limit = 4
	server := newLimitTransport(t, NetworkTransportConfig{MaxInboundConns: limit, FirstByteTimeout: time.Minute, IdleTimeout: time.Minute})
	serve(t, server, answerOK)
	used := dialRaw(t, server)
	rawRPC(t, used)
	s1, s2, s3 := dialRaw(t, server), dialRaw(t, server), dialRaw(t, server)

	n1 := dialRaw(t, server)
	waitClosed(t, s1, 5*time.Second)
	pollFor(t, 5*time.Second, "the eviction", func() bool { return stats(server).Evicted == 1 })
	assertOpen(t, s2, "the second silent connection")
	assertOpen(t, s3, "the third silent connection")
	assertOpen(t, n1, "the newcomer")
	rawRPC(t, used)

	n2 := dialRaw(t, server)
	waitClosed(t, s2, 5*time.Second)
	pollFor(t, 5*time.Second, "the second eviction", func() bool { return stats(server).Evicted == 2 })
	assertOpen(t, s3, "the third silent connection")

	// The newcomers begin RPCs: s3 is the one left to evict.
	rawRPC(t, n1)
	rawRPC(t, n2)
	n3 := dialRaw(t, server)
	waitClosed(t, s3, 5*time.Second)
	pollFor(t, 5*time.Second, "the third eviction", func() bool { return stats(server).Evicted == 3 })
	rawRPC(t, n3)

	// Every open connection has carried an RPC: a newcomer is refused.
	n4 := dialRefused(t, server)
	waitClosed(t, n4, 5*time.Second)
	pollFor(t, 5*time.Second, "the refusal", func() bool { return stats(server).TooManyConnections == 1 })
	for _, c := range []net.Conn{used, n1, n2, n3} {
		rawRPC(t, c)
	}
	if s := stats(server); s.Total() != 4 {
		t.Errorf("stats %+v, want 3 evictions and 1 refusal", s)
	}
}

// dialWatcher opens a watcher connection to trans.
func dialWatcher(t *testing.T, trans *NetworkTransport) net.Conn {
	t.Helper()
	c := dialRaw(t, trans)
	if _, err := c.Write([]byte{WatchMarker}); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 5*time.Second, "the watcher to be marked", func() bool { return trans.inbound.countIn(inboundWatcher) >= 1 })
	return c
}

// A watcher is held past the first-byte and idle timeouts and counted as
// nothing; it is closed when the transport shuts down.
func TestNetworkTransport_WatcherHeld(t *testing.T) {
	server := newLimitTransport(t, NetworkTransportConfig{FirstByteTimeout: 100 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	serve(t, server, answerOK)
	w := dialWatcher(t, server)
	silent := dialRaw(t, server)
	waitClosed(t, silent, 5*time.Second)
	used := dialRaw(t, server)
	rawRPC(t, used)
	if took := waitClosed(t, used, 5*time.Second); took < 250*time.Millisecond {
		t.Errorf("closed after %s, before the idle timeout", took)
	}
	pollFor(t, 5*time.Second, "the first-byte and idle refusals", func() bool {
		s := stats(server)
		return s.FirstByte == 1 && s.Idle == 1
	})
	// w has been open longer than both timeouts.
	assertOpen(t, w, "the watcher")
	if s := stats(server); s.Total() != 2 {
		t.Errorf("stats %+v, want one first-byte and one idle refusal", s)
	}
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, w, 5*time.Second)
}

// A watcher that sends anything after its marker is closed as malformed;
// a marker after an RPC is an unknown RPC type.
func TestNetworkTransport_WatcherSendsNothing(t *testing.T) {
	server := newLimitTransport(t, NetworkTransportConfig{})
	serve(t, server, answerOK)
	w := dialWatcher(t, server)
	if _, err := w.Write([]byte{rpcAppendEntries}); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, w, 5*time.Second)
	pollFor(t, 5*time.Second, "the malformed refusal", func() bool { return stats(server).Malformed == 1 })

	used := dialRaw(t, server)
	rawRPC(t, used)
	if _, err := used.Write([]byte{WatchMarker}); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, used, 5*time.Second)
	pollFor(t, 5*time.Second, "the second malformed refusal", func() bool { return stats(server).Malformed == 2 })
}

// A watcher gives way at MaxInboundConns like a connection that has begun
// no RPC: the oldest of either goes first.
func TestNetworkTransport_WatcherEvictable(t *testing.T) {
	const limit = 3
	server := newLimitTransport(t, NetworkTransportConfig{MaxInboundConns: limit, FirstByteTimeout: time.Minute, IdleTimeout: time.Minute})
	serve(t, server, answerOK)
	used := dialRaw(t, server)
	rawRPC(t, used)
	w := dialWatcher(t, server)
	silent := dialRaw(t, server)

	n1 := dialRaw(t, server)
	waitClosed(t, w, 5*time.Second)
	pollFor(t, 5*time.Second, "the watcher's eviction", func() bool { return stats(server).Evicted == 1 })
	assertOpen(t, silent, "the silent connection")

	dialRaw(t, server)
	waitClosed(t, silent, 5*time.Second)
	pollFor(t, 5*time.Second, "the silent connection's eviction", func() bool { return stats(server).Evicted == 2 })
	assertOpen(t, n1, "the first newcomer")
	rawRPC(t, used)
	if s := stats(server); s.Total() != 2 {
		t.Errorf("stats %+v, want 2 evictions", s)
	}
}

// A pooled connection the peer closed for idleness costs no failed RPC:
// the request goes again on a new connection.
func TestNetworkTransport_PooledConnClosedByPeerIsRetried(t *testing.T) {
	server := newLimitTransport(t, NetworkTransportConfig{IdleTimeout: 100 * time.Millisecond})
	got := serve(t, server, answerOK)
	// The client keeps pooled connections forever.
	client := newLimitTransport(t, NetworkTransportConfig{IdleTimeout: -1})
	var resp AppendEntriesResponse
	req := &AppendEntriesRequest{Term: 1, RPCHeader: RPCHeader{Addr: []byte("leader")}}
	for round := 1; round <= 3; round++ {
		if err := client.AppendEntries("s", server.LocalAddr(), req, &resp); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if n := len(client.connPool[server.LocalAddr()]); n != 1 {
			t.Fatalf("round %d: %d pooled connections", round, n)
		}
		pollFor(t, 5*time.Second, "the server to close the idle connection", func() bool { return stats(server).Idle == uint64(round) })
	}
	if n := got.Load(); n != 3 {
		t.Errorf("%d requests served, want 3", n)
	}
}

// Pooled connections idle for half the IdleTimeout are closed.
func TestNetworkTransport_PooledConnsExpire(t *testing.T) {
	server := newLimitTransport(t, NetworkTransportConfig{})
	serve(t, server, answerOK)
	client := newLimitTransport(t, NetworkTransportConfig{IdleTimeout: 200 * time.Millisecond})
	var resp AppendEntriesResponse
	if err := client.AppendEntries("s", server.LocalAddr(), &AppendEntriesRequest{Term: 1}, &resp); err != nil {
		t.Fatal(err)
	}
	pooled := func() int {
		client.connPoolLock.Lock()
		defer client.connPoolLock.Unlock()
		return len(client.connPool[server.LocalAddr()])
	}
	if pooled() != 1 {
		t.Fatal("connection not pooled")
	}
	pollFor(t, 5*time.Second, "the pooled connection to expire", func() bool { return pooled() == 0 })
	if s := stats(server); s.Idle != 0 {
		t.Errorf("server closed %d idle connections; the client should have first", s.Idle)
	}
}

// A leader keeps each AppendEntries below its transport's MaxRPCSize, so
// entries that together exceed it still replicate.
func TestRaft_AppendEntriesStayBelowMaxRPCSize(t *testing.T) {
	rafts, transports, fsms := startTCPRafts(t, 3, NetworkTransportConfig{MaxRPCSize: 512 << 10})
	leader := leaderOf(rafts)
	var futures []ApplyFuture
	for i := 0; i < 40; i++ {
		futures = append(futures, leader.Apply(bytes.Repeat([]byte{byte(i)}, 100<<10), 10*time.Second))
	}
	for i, f := range futures {
		if err := f.Error(); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
	pollFor(t, 20*time.Second, "every follower to apply every entry", func() bool {
		for _, f := range fsms {
			if len(f.Logs()) < 40 {
				return false
			}
		}
		return true
	})
	for i, trans := range transports {
		if s := stats(trans); s.TooLarge != 0 {
			t.Errorf("transport %d refused: %+v", i, s)
		}
	}
}

func TestSetNewLogs_Budget(t *testing.T) {
	store := NewInmemStore()
	for i := uint64(1); i <= 10; i++ {
		if err := store.StoreLog(&Log{Index: i, Term: 1, Data: make([]byte, 1000)}); err != nil {
			t.Fatal(err)
		}
	}
	r := &Raft{logs: store, appendEntriesBytes: 3500}
	r.conf.Store(*DefaultConfig())
	var req AppendEntriesRequest
	if err := r.setNewLogs(&req, 1, 10); err != nil {
		t.Fatal(err)
	}
	if len(req.Entries) != 3 {
		t.Errorf("%d entries within 3500 bytes, want 3", len(req.Entries))
	}
	// One entry larger than the budget still goes, alone.
	r.appendEntriesBytes = 10
	if err := r.setNewLogs(&req, 4, 10); err != nil {
		t.Fatal(err)
	}
	if len(req.Entries) != 1 || req.Entries[0].Index != 4 {
		t.Errorf("entries %v", req.Entries)
	}
}

// Warm leaves connections pooled that have carried a ping, which raft never
// sees; raft's next RPCs use them instead of dialling.
func TestNetworkTransport_Warm(t *testing.T) {
	server := newLimitTransport(t, NetworkTransportConfig{})
	got := serve(t, server, answerOK)
	client := newLimitTransport(t, NetworkTransportConfig{MaxPool: 3})
	pooled := func() int {
		client.connPoolLock.Lock()
		defer client.connPoolLock.Unlock()
		return len(client.connPool[server.LocalAddr()])
	}
	for range 2 {
		if err := client.Warm("s", server.LocalAddr(), 2); err != nil {
			t.Fatal(err)
		}
	}
	if n := pooled(); n != 2 {
		t.Fatalf("%d pooled connections after Warm, want 2", n)
	}
	if n := got.Load(); n != 0 {
		t.Fatalf("raft saw %d RPCs from Warm, want none", n)
	}
	pollFor(t, 5*time.Second, "two connections at the server", func() bool { return server.inbound.countIn(inboundUsed) == 2 })
	var resp RequestVoteResponse
	if err := client.RequestVote("s", server.LocalAddr(), &RequestVoteRequest{Term: 1}, &resp); err != nil {
		t.Fatal(err)
	}
	if n := server.inbound.countIn(inboundUsed); n != 2 || got.Load() != 1 {
		t.Errorf("%d connections at the server and %d RPCs served, want the 2 warm ones and 1", n, got.Load())
	}
	if s := stats(server); s.Total() != 0 {
		t.Errorf("stats %+v, want no refusal", s)
	}
}
