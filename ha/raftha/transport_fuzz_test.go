package raftha

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// FuzzPeerPort sends arbitrary bytes to a raft transport's peer port, as a
// hostile or broken peer would. The transport must not panic, must answer
// or close within its deadlines, and must still serve a well-formed RPC on
// a new connection afterwards.
func FuzzPeerPort(f *testing.F) {
	trans, err := raft.NewTCPTransportWithConfig("127.0.0.1:0", nil, &raft.NetworkTransportConfig{
		MaxPool:          1,
		Timeout:          time.Second,
		Logger:           hclog.NewNullLogger(),
		MaxRPCSize:       64 << 10,
		RPCTimeout:       20 * time.Millisecond,
		IdleTimeout:      20 * time.Millisecond,
		FirstByteTimeout: 20 * time.Millisecond,
		MaxInboundConns:  16,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = trans.Close() })
	stop := make(chan struct{})
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		for {
			select {
			case rpc := <-trans.Consumer():
				rpc.Respond(nil, errors.New("fuzz: refused"))
			case <-stop:
				return
			}
		}
	}()
	f.Cleanup(func() { close(stop); <-answered })
	addr := trans.LocalAddr()
	peer, err := raft.NewTCPTransportWithConfig("127.0.0.1:0", nil, &raft.NetworkTransportConfig{
		MaxPool: 1, Timeout: time.Second, Logger: hclog.NewNullLogger(),
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = peer.Close() })

	// Seeds: a well-formed AppendEntries, one with a huge term, a
	// truncated one, and a huge declared length.
	encode := func(typ byte, v any) []byte {
		var b bytes.Buffer
		b.WriteByte(typ)
		if err := codec.NewEncoder(&b, &codec.MsgpackHandle{}).Encode(v); err != nil {
			f.Fatal(err)
		}
		return b.Bytes()
	}
	good := encode(0, &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 1, PrevLogTerm: 1,
		Entries: []*raft.Log{{Index: 2, Term: 3, Data: []byte("x")}}})
	f.Add(good)
	f.Add(encode(1, &raft.RequestVoteRequest{Term: 1<<64 - 1, LastLogIndex: 9, LastLogTerm: 1<<64 - 1}))
	f.Add(good[:len(good)/2])
	f.Add([]byte{0, 0x81, 0xa7, 'E', 'n', 't', 'r', 'i', 'e', 's', 0xdd, 0x7f, 0xff, 0xff, 0xff})
	f.Add([]byte{raft.WatchMarker, 1, 2, 3})

	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := net.DialTimeout("tcp", string(addr), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		// A lone watch marker is held on purpose (the exit watch).
		watcher := len(in) == 1 && in[0] == raft.WatchMarker
		if _, err := c.Write(in); err == nil && !watcher {
			// The transport answers, or closes the connection within
			// its deadlines; it never holds it.
			if _, err := io.Copy(io.Discard, c); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("the transport held a connection past its deadlines after %d bytes", len(in))
				}
			}
		}
		// A well-formed RPC is still served.
		var resp raft.AppendEntriesResponse
		err = peer.AppendEntries("n1", addr, &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 1, PrevLogTerm: 1}, &resp)
		if err == nil || err.Error() != "fuzz: refused" {
			t.Fatalf("after %d bytes, a well-formed RPC got %v, want the consumer's answer", len(in), err)
		}
	})
}
