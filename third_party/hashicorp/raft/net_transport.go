// Copyright IBM Corp. 2013, 2025
// SPDX-License-Identifier: MPL-2.0

package raft

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-metrics"
	"github.com/hashicorp/go-msgpack/v2/codec"
)

const (
	rpcAppendEntries uint8 = iota
	rpcRequestVote
	rpcInstallSnapshot
	rpcTimeoutNow
	rpcRequestPreVote

	// rpcWatch is not an RPC: sent as the first byte of a connection, it
	// makes the connection a watcher, which the dialer holds open only to
	// learn when this node's process exits (its kernel then closes it).
	// Nothing else is ever sent on it and nothing is read from it but its
	// close; it is exempt from FirstByteTimeout and IdleTimeout, is not
	// refused for its silence, and is closed when the transport shuts
	// down. Like a connection that has begun no RPC, it gives way to a
	// newer connection at MaxInboundConns. A transport that predates it
	// closes the connection (an unknown RPC type). Its value stays clear
	// of the types added in sequence above.
	rpcWatch uint8 = 0xfe

	// WatchMarker is the byte a watcher sends first (see rpcWatch).
	WatchMarker = rpcWatch

	// rpcPing is not a raft RPC either: the transport that receives it
	// answers it at once with an empty response, and raft never sees it.
	// Warm sends it to keep a pooled connection to a peer open and known
	// to work. A transport that predates it refuses it as an unknown RPC
	// type and closes the connection.
	rpcPing uint8 = 0xfd

	// DefaultTimeoutScale is the default TimeoutScale in a NetworkTransport.
	DefaultTimeoutScale = 256 * 1024 // 256KB

	// DefaultMaxRPCsInFlight is the default value used for pipelining configuration
	// if a zero value is passed. See https://github.com/hashicorp/raft/pull/541
	// for rationale. Note, if this is changed we should update the doc comments
	// below for NetworkTransportConfig.MaxRPCsInFlight.
	DefaultMaxRPCsInFlight = 2

	// connReceiveBufferSize is the size of the buffer we will use for reading RPC requests into
	// on followers
	connReceiveBufferSize = 256 * 1024 // 256KB

	// connSendBufferSize is the size of the buffer we will use for sending RPC request data from
	// the leader to followers.
	connSendBufferSize = 256 * 1024 // 256KB

	// minInFlightForPipelining is a property of our current pipelining
	// implementation and must not be changed unless we change the invariants of
	// that implementation. Roughly speaking even with a zero-length in-flight
	// buffer we still allow 2 requests to be in-flight before we block because we
	// only block after sending and the receiving go-routine always unblocks the
	// chan right after first send. This is a constant just to provide context
	// rather than a magic number in a few places we have to check invariants to
	// avoid panics etc.
	minInFlightForPipelining = 2
)

var (
	// ErrTransportShutdown is returned when operations on a transport are
	// invoked after it's been terminated.
	ErrTransportShutdown = errors.New("transport shutdown")

	// ErrPipelineShutdown is returned when the pipeline is closed.
	ErrPipelineShutdown = errors.New("append pipeline closed")
)

// NetworkTransport provides a network based transport that can be
// used to communicate with Raft on remote machines. It requires
// an underlying stream layer to provide a stream abstraction, which can
// be simple TCP, TLS, etc.
//
// This transport is very simple and lightweight. Each RPC request is
// framed by sending a byte that indicates the message type, followed
// by the MsgPack encoded request.
//
// The response is an error string followed by the response object,
// both are encoded using MsgPack.
//
// InstallSnapshot is special, in that after the RPC request we stream
// the entire state. That socket is not re-used as the connection state
// is not known if there is an error.
type NetworkTransport struct {
	connPool     map[ServerAddress][]*netConn
	connPoolLock sync.Mutex

	consumeCh chan RPC

	heartbeatFn     func(RPC)
	heartbeatFnLock sync.Mutex

	logger hclog.Logger

	maxPool     int
	maxInFlight int

	serverAddressLock     sync.RWMutex
	serverAddressProvider ServerAddressProvider

	shutdown     bool
	shutdownCh   chan struct{}
	shutdownLock sync.Mutex

	stream StreamLayer

	// streamCtx is used to cancel existing connection handlers.
	streamCtx     context.Context
	streamCancel  context.CancelFunc
	streamCtxLock sync.RWMutex

	timeout      time.Duration
	TimeoutScale int

	msgpackUseNewTimeFormat bool

	// Bounds on the peer port (see NetworkTransportConfig); negative
	// means none.
	maxRPCSize       int64
	rpcTimeout       time.Duration
	idleTimeout      time.Duration
	firstByteTimeout time.Duration
	maxInbound       int
	// poolIdleTimeout expires pooled outbound connections (0: never).
	poolIdleTimeout time.Duration

	inbound    inboundSet // inbound connections open
	refused    refusalCounters
	refusalLog refusalLog
}

// NetworkTransportConfig encapsulates configuration for the network transport layer.
type NetworkTransportConfig struct {
	// ServerAddressProvider is used to override the target address when establishing a connection to invoke an RPC
	ServerAddressProvider ServerAddressProvider

	Logger hclog.Logger

	// Dialer
	Stream StreamLayer

	// MaxPool controls how many connections we will pool
	MaxPool int

	// MaxRPCsInFlight controls the pipelining "optimization" when replicating
	// entries to followers.
	//
	// Setting this to 1 explicitly disables pipelining since no overlapping of
	// request processing is allowed. If set to 1 the pipelining code path is
	// skipped entirely and every request is entirely synchronous.
	//
	// If zero is set (or left as default), DefaultMaxRPCsInFlight is used which
	// is currently 2. A value of 2 overlaps the preparation and sending of the
	// next request while waiting for the previous response, but avoids additional
	// queuing.
	//
	// Historically this was internally fixed at (effectively) 130 however
	// performance testing has shown that in practice the pipelining optimization
	// combines badly with batching and actually has a very large negative impact
	// on commit latency when throughput is high, whilst having very little
	// benefit on latency or throughput in any other case! See
	// [#541](https://github.com/hashicorp/raft/pull/541) for more analysis of the
	// performance impacts.
	//
	// Increasing this beyond 2 is likely to be beneficial only in very
	// high-latency network conditions. HashiCorp doesn't recommend using our own
	// products this way.
	//
	// To maintain the behavior from before version 1.4.1 exactly, set this to
	// 130. The old internal constant was 128 but was used directly as a channel
	// buffer size. Since we send before blocking on the channel and unblock the
	// channel as soon as the receiver is done with the earliest outstanding
	// request, even an unbuffered channel (buffer=0) allows one request to be
	// sent while waiting for the previous one (i.e. 2 inflight). so the old
	// buffer actually allowed 130 RPCs to be inflight at once.
	MaxRPCsInFlight int

	// Timeout is used to apply I/O deadlines. For InstallSnapshot, we multiply
	// the timeout by (SnapshotSize / TimeoutScale).
	Timeout time.Duration

	// MsgpackUseNewTimeFormat when set to true, force the underlying msgpack
	// codec to use the new format of time.Time when encoding (used in
	// go-msgpack v1.1.5 by default). Decoding is not affected, as all
	// go-msgpack v2.1.0+ decoders know how to decode both formats.
	MsgpackUseNewTimeFormat bool

	// MaxRPCSize bounds the encoded size of one RPC this transport reads,
	// request or response; InstallSnapshot's data stream does not count.
	// A larger one is refused before its body is read into memory, and
	// its connection closed. A raft leader on this transport keeps its
	// AppendEntries below it (one entry larger than it cannot be
	// replicated). Zero means DefaultMaxRPCSize, negative no limit.
	MaxRPCSize int64

	// RPCTimeout bounds reading an inbound RPC once its first byte has
	// arrived, and writing its response; InstallSnapshot's data stream gets
	// it once per TimeoutScale bytes. A peer that misses it is cut off.
	// Zero means the larger of Timeout and DefaultRPCTimeout, negative
	// none.
	RPCTimeout time.Duration

	// IdleTimeout closes an inbound connection that starts no RPC for this
	// long, before its first one too. Keep it well above HeartbeatTimeout
	// and CommitTimeout, which pace a leader's RPCs. Pooled outbound
	// connections idle for half of it are closed rather than reused, and
	// an RPC that finds its pooled connection closed by the peer is sent
	// once more on a new one. Zero means DefaultIdleTimeout, negative
	// none.
	IdleTimeout time.Duration

	// FirstByteTimeout closes an inbound connection that has not begun an
	// RPC this long after it was accepted (a watcher, see rpcWatch, is
	// exempt once it has said so). It must exceed the time a peer takes
	// from its dial to its first RPC: a TLS handshake, and CommitTimeout
	// for a replication pipeline. The smaller of it and IdleTimeout
	// bounds the wait for the first RPC. Zero means
	// DefaultFirstByteTimeout, negative none.
	FirstByteTimeout time.Duration

	// MaxInboundConns caps the inbound connections open at once. At the
	// cap a new connection closes the oldest open one that has begun no
	// RPC (a watcher included) and takes its place; only if every open
	// connection has carried an RPC is the new one closed at once. Zero
	// means DefaultMaxInboundConns, negative no cap.
	MaxInboundConns int
}

// ServerAddressProvider is a target address to which we invoke an RPC when establishing a connection
type ServerAddressProvider interface {
	ServerAddr(id ServerID) (ServerAddress, error)
}

// StreamLayer is used with the NetworkTransport to provide
// the low level stream abstraction.
type StreamLayer interface {
	net.Listener

	// Dial is used to create a new outgoing connection
	Dial(address ServerAddress, timeout time.Duration) (net.Conn, error)
}

type netConn struct {
	target ServerAddress
	conn   net.Conn
	w      *bufio.Writer
	dec    *codec.Decoder
	enc    *codec.Encoder
	// guard bounds each response dec reads.
	guard *rpcGuard
	// pooled is set when the connection came out of the pool, idle is
	// when it went in.
	pooled bool
	idle   time.Time
}

func (n *netConn) Release() error {
	return n.conn.Close()
}

type netPipeline struct {
	conn  *netConn
	trans *NetworkTransport

	doneCh       chan AppendFuture
	inprogressCh chan *appendFuture

	shutdown     bool
	shutdownCh   chan struct{}
	shutdownLock sync.Mutex
}

// NewNetworkTransportWithConfig creates a new network transport with the given config struct
func NewNetworkTransportWithConfig(
	config *NetworkTransportConfig,
) *NetworkTransport {
	if config.Logger == nil {
		config.Logger = hclog.New(&hclog.LoggerOptions{
			Name:   "raft-net",
			Output: hclog.DefaultOutput,
			Level:  hclog.DefaultLevel,
		})
	}
	maxInFlight := config.MaxRPCsInFlight
	if maxInFlight == 0 {
		// Default zero value
		maxInFlight = DefaultMaxRPCsInFlight
	}
	trans := &NetworkTransport{
		connPool:                make(map[ServerAddress][]*netConn),
		consumeCh:               make(chan RPC),
		logger:                  config.Logger,
		maxPool:                 config.MaxPool,
		maxInFlight:             maxInFlight,
		shutdownCh:              make(chan struct{}),
		stream:                  config.Stream,
		timeout:                 config.Timeout,
		TimeoutScale:            DefaultTimeoutScale,
		serverAddressProvider:   config.ServerAddressProvider,
		msgpackUseNewTimeFormat: config.MsgpackUseNewTimeFormat,
		maxRPCSize:              config.MaxRPCSize,
		rpcTimeout:              config.RPCTimeout,
		idleTimeout:             config.IdleTimeout,
		firstByteTimeout:        config.FirstByteTimeout,
		maxInbound:              config.MaxInboundConns,
	}
	if trans.maxRPCSize == 0 {
		trans.maxRPCSize = DefaultMaxRPCSize
	}
	if trans.rpcTimeout == 0 {
		trans.rpcTimeout = DefaultRPCTimeout
		if config.Timeout > trans.rpcTimeout {
			trans.rpcTimeout = config.Timeout
		}
	}
	if trans.idleTimeout == 0 {
		trans.idleTimeout = DefaultIdleTimeout
	}
	if trans.idleTimeout > 0 {
		// Drop a pooled connection well before a peer with the same
		// setting closes it for idleness.
		trans.poolIdleTimeout = trans.idleTimeout / 2
	}
	if trans.firstByteTimeout == 0 {
		trans.firstByteTimeout = DefaultFirstByteTimeout
	}
	if trans.maxInbound == 0 {
		trans.maxInbound = DefaultMaxInboundConns
	}

	// Create the connection context and then start our listener.
	trans.setupStreamContext()
	go trans.listen()
	if trans.poolIdleTimeout > 0 {
		go trans.expirePooledConns()
	}

	return trans
}

// NewNetworkTransport creates a new network transport with the given dialer
// and listener. The maxPool controls how many connections we will pool. The
// timeout is used to apply I/O deadlines. For InstallSnapshot, we multiply
// the timeout by (SnapshotSize / TimeoutScale).
func NewNetworkTransport(
	stream StreamLayer,
	maxPool int,
	timeout time.Duration,
	logOutput io.Writer,
) *NetworkTransport {
	if logOutput == nil {
		logOutput = os.Stderr
	}
	logger := hclog.New(&hclog.LoggerOptions{
		Name:   "raft-net",
		Output: logOutput,
		Level:  hclog.DefaultLevel,
	})
	config := &NetworkTransportConfig{Stream: stream, MaxPool: maxPool, Timeout: timeout, Logger: logger}
	return NewNetworkTransportWithConfig(config)
}

// NewNetworkTransportWithLogger creates a new network transport with the given logger, dialer
// and listener. The maxPool controls how many connections we will pool. The
// timeout is used to apply I/O deadlines. For InstallSnapshot, we multiply
// the timeout by (SnapshotSize / TimeoutScale).
func NewNetworkTransportWithLogger(
	stream StreamLayer,
	maxPool int,
	timeout time.Duration,
	logger hclog.Logger,
) *NetworkTransport {
	config := &NetworkTransportConfig{Stream: stream, MaxPool: maxPool, Timeout: timeout, Logger: logger}
	return NewNetworkTransportWithConfig(config)
}

// setupStreamContext is used to create a new stream context. This should be
// called with the stream lock held.
func (n *NetworkTransport) setupStreamContext() {
	ctx, cancel := context.WithCancel(context.Background())
	n.streamCtx = ctx
	n.streamCancel = cancel
}

// getStreamContext is used retrieve the current stream context.
func (n *NetworkTransport) getStreamContext() context.Context {
	n.streamCtxLock.RLock()
	defer n.streamCtxLock.RUnlock()
	return n.streamCtx
}

// SetHeartbeatHandler is used to set up a heartbeat handler
// as a fast-pass. This is to avoid head-of-line blocking from
// disk IO.
func (n *NetworkTransport) SetHeartbeatHandler(cb func(rpc RPC)) {
	n.heartbeatFnLock.Lock()
	defer n.heartbeatFnLock.Unlock()
	n.heartbeatFn = cb
}

// CloseStreams closes the current streams.
func (n *NetworkTransport) CloseStreams() {
	n.connPoolLock.Lock()
	defer n.connPoolLock.Unlock()

	// Close all the connections in the connection pool and then remove their
	// entry.
	for k, e := range n.connPool {
		for _, conn := range e {
			_ = conn.Release()
		}

		delete(n.connPool, k)
	}

	// Cancel the existing connections and create a new context. Both these
	// operations must always be done with the lock held otherwise we can create
	// connection handlers that are holding a context that will never be
	// cancelable.
	n.streamCtxLock.Lock()
	n.streamCancel()
	n.setupStreamContext()
	n.streamCtxLock.Unlock()
}

// Close is used to stop the network transport.
func (n *NetworkTransport) Close() error {
	n.shutdownLock.Lock()
	defer n.shutdownLock.Unlock()

	if !n.shutdown {
		close(n.shutdownCh)
		_ = n.stream.Close()
		n.inbound.shutdown()
		n.shutdown = true
	}
	return nil
}

// Consumer implements the Transport interface.
func (n *NetworkTransport) Consumer() <-chan RPC {
	return n.consumeCh
}

// LocalAddr implements the Transport interface.
func (n *NetworkTransport) LocalAddr() ServerAddress {
	return ServerAddress(n.stream.Addr().String())
}

// IsShutdown is used to check if the transport is shutdown.
func (n *NetworkTransport) IsShutdown() bool {
	select {
	case <-n.shutdownCh:
		return true
	default:
		return false
	}
}

// getExistingConn is used to grab a pooled connection.
func (n *NetworkTransport) getPooledConn(target ServerAddress) *netConn {
	n.connPoolLock.Lock()
	defer n.connPoolLock.Unlock()

	conns, ok := n.connPool[target]
	if !ok || len(conns) == 0 {
		return nil
	}

	var conn *netConn
	for len(conns) > 0 {
		num := len(conns)
		conn, conns[num-1] = conns[num-1], nil
		conns = conns[:num-1]
		if n.poolIdleTimeout > 0 && time.Since(conn.idle) > n.poolIdleTimeout {
			// The peer may be about to close it for idleness.
			_ = conn.Release()
			conn = nil
			continue
		}
		break
	}
	n.connPool[target] = conns
	if conn != nil {
		conn.pooled = true
	}
	return conn
}

// expirePooledConns closes pooled connections idle for longer than
// poolIdleTimeout, until the transport shuts down.
func (n *NetworkTransport) expirePooledConns() {
	every := n.poolIdleTimeout / 2
	if every < 10*time.Millisecond {
		every = 10 * time.Millisecond
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-n.shutdownCh:
			return
		case <-tick.C:
		}
		n.connPoolLock.Lock()
		for target, conns := range n.connPool {
			kept := conns[:0]
			for _, c := range conns {
				if time.Since(c.idle) > n.poolIdleTimeout {
					_ = c.Release()
				} else {
					kept = append(kept, c)
				}
			}
			clear(conns[len(kept):])
			n.connPool[target] = kept
		}
		n.connPoolLock.Unlock()
	}
}

// getConnFromAddressProvider returns a connection from the server address provider if available, or defaults to a connection using the target server address
func (n *NetworkTransport) getConnFromAddressProvider(id ServerID, target ServerAddress) (*netConn, error) {
	address := n.getProviderAddressOrFallback(id, target)
	return n.getConn(address)
}

func (n *NetworkTransport) getProviderAddressOrFallback(id ServerID, target ServerAddress) ServerAddress {
	n.serverAddressLock.RLock()
	defer n.serverAddressLock.RUnlock()
	if n.serverAddressProvider != nil {
		serverAddressOverride, err := n.serverAddressProvider.ServerAddr(id)
		if err != nil {
			n.logger.Warn("unable to get address for server, using fallback address", "id", id, "fallback", target, "error", err)
		} else {
			return serverAddressOverride
		}
	}
	return target
}

// getConn is used to get a connection from the pool.
func (n *NetworkTransport) getConn(target ServerAddress) (*netConn, error) {
	// Check for a pooled conn
	if conn := n.getPooledConn(target); conn != nil {
		return conn, nil
	}
	return n.dialConn(target)
}

// dialConn opens a new connection to target.
func (n *NetworkTransport) dialConn(target ServerAddress) (*netConn, error) {
	// Dial a new connection
	conn, err := n.stream.Dial(target, n.timeout)
	if err != nil {
		return nil, err
	}

	// Wrap the conn. Responses are read through a guard, like requests.
	guard := &rpcGuard{r: bufio.NewReader(conn)}
	netConn := &netConn{
		target: target,
		conn:   conn,
		guard:  guard,
		dec:    codec.NewDecoder(guard, &codec.MsgpackHandle{}),
		w:      bufio.NewWriterSize(conn, connSendBufferSize),
	}

	mp := &codec.MsgpackHandle{}
	mp.TimeNotBuiltin = !n.msgpackUseNewTimeFormat
	netConn.enc = codec.NewEncoder(netConn.w, mp)

	// Done
	return netConn, nil
}

// returnConn returns a connection back to the pool.
func (n *NetworkTransport) returnConn(conn *netConn) {
	n.connPoolLock.Lock()
	defer n.connPoolLock.Unlock()

	key := conn.target
	conns := n.connPool[key]

	if !n.IsShutdown() && len(conns) < n.maxPool {
		conn.idle = time.Now()
		conn.pooled = false
		n.connPool[key] = append(conns, conn)
	} else {
		_ = conn.Release()
	}
}

// AppendEntriesPipeline returns an interface that can be used to pipeline
// AppendEntries requests.
func (n *NetworkTransport) AppendEntriesPipeline(id ServerID, target ServerAddress) (AppendPipeline, error) {
	if n.maxInFlight < minInFlightForPipelining {
		// Pipelining is disabled since no more than one request can be outstanding
		// at once. Skip the whole code path and use synchronous requests.
		return nil, ErrPipelineReplicationNotSupported
	}

	// Get a connection
	conn, err := n.getConnFromAddressProvider(id, target)
	if err != nil {
		return nil, err
	}

	// Create the pipeline
	return newNetPipeline(n, conn, n.maxInFlight), nil
}

// AppendEntries implements the Transport interface.
func (n *NetworkTransport) AppendEntries(id ServerID, target ServerAddress, args *AppendEntriesRequest, resp *AppendEntriesResponse) error {
	return n.genericRPC(id, target, rpcAppendEntries, args, resp)
}

// RequestVote implements the Transport interface.
func (n *NetworkTransport) RequestVote(id ServerID, target ServerAddress, args *RequestVoteRequest, resp *RequestVoteResponse) error {
	return n.genericRPC(id, target, rpcRequestVote, args, resp)
}

// RequestPreVote implements the Transport interface.
func (n *NetworkTransport) RequestPreVote(id ServerID, target ServerAddress, args *RequestPreVoteRequest, resp *RequestPreVoteResponse) error {
	return n.genericRPC(id, target, rpcRequestPreVote, args, resp)
}

// pingMessage is the request and the response of rpcPing.
type pingMessage struct{}

// Warm has the transport hold n pooled connections to target that have
// just carried a round trip: it sends a ping on n connections at once,
// taken from the pool or dialled (and returned to it; at most MaxPool
// stay). Raft's own RPCs to target then find a connection made, with no
// dial or handshake in the way: a candidate's RequestVote, and a new
// leader's first AppendEntries. Calling it more often than the peer's
// IdleTimeout keeps those connections from closing for idleness.
func (n *NetworkTransport) Warm(id ServerID, target ServerAddress, conns int) error {
	if conns > n.maxPool {
		conns = n.maxPool
	}
	if conns < 1 {
		conns = 1
	}
	errs := make(chan error, conns)
	for range conns {
		go func() {
			var resp pingMessage
			errs <- n.genericRPC(id, target, rpcPing, &pingMessage{}, &resp)
		}()
	}
	var first error
	for range conns {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// PooledConns is how many connections to target the pool holds.
func (n *NetworkTransport) PooledConns(target ServerAddress) int {
	n.connPoolLock.Lock()
	defer n.connPoolLock.Unlock()
	return len(n.connPool[target])
}

// genericRPC handles a simple request/response RPC.
func (n *NetworkTransport) genericRPC(id ServerID, target ServerAddress, rpcType uint8, args interface{}, resp interface{}) error {
	// Get a conn
	address := n.getProviderAddressOrFallback(id, target)
	conn, err := n.getConn(address)
	if err != nil {
		return err
	}

	hungUp, err := n.roundTrip(conn, rpcType, args, resp)
	if err != nil && hungUp && conn.pooled {
		// The peer closed this pooled connection while it sat idle
		// (IdleTimeout), before reading the request: send it again on a
		// new connection rather than fail the RPC.
		fresh, derr := n.dialConn(address)
		if derr != nil {
			return err
		}
		_, err = n.roundTrip(fresh, rpcType, args, resp)
	}
	return err
}

// roundTrip sends one RPC on conn and reads its response, returning conn to
// the pool if it can carry another. hungUp reports that the peer had closed
// the connection before it answered anything.
func (n *NetworkTransport) roundTrip(conn *netConn, rpcType uint8, args interface{}, resp interface{}) (hungUp bool, err error) {
	// Set a deadline
	if n.timeout > 0 {
		_ = conn.conn.SetDeadline(time.Now().Add(n.timeout))
	}

	// Send the RPC
	if err = sendRPC(conn, rpcType, args); err != nil {
		return peerHungUp(err), err
	}

	// Decode the response
	canReturn, err := n.decodeResponse(conn, resp)
	if canReturn {
		n.returnConn(conn)
	}
	return err != nil && conn.guard.read == 0 && peerHungUp(conn.guard.ioErr), err
}

// InstallSnapshot implements the Transport interface.
func (n *NetworkTransport) InstallSnapshot(id ServerID, target ServerAddress, args *InstallSnapshotRequest, resp *InstallSnapshotResponse, data io.Reader) error {
	// Get a conn, always close for InstallSnapshot
	conn, err := n.getConnFromAddressProvider(id, target)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Release() }()

	// Set a deadline, scaled by request size
	if n.timeout > 0 {
		timeout := n.timeout * time.Duration(args.Size/int64(n.TimeoutScale))
		if timeout < n.timeout {
			timeout = n.timeout
		}
		_ = conn.conn.SetDeadline(time.Now().Add(timeout))
	}

	// Send the RPC
	if err = sendRPC(conn, rpcInstallSnapshot, args); err != nil {
		return err
	}

	// Stream the state
	if _, err = io.Copy(conn.w, data); err != nil {
		return err
	}

	// Flush
	if err = conn.w.Flush(); err != nil {
		return err
	}

	// Decode the response, do not return conn
	_, err = n.decodeResponse(conn, resp)
	return err
}

// EncodePeer implements the Transport interface.
func (n *NetworkTransport) EncodePeer(id ServerID, p ServerAddress) []byte {
	address := n.getProviderAddressOrFallback(id, p)
	return []byte(address)
}

// DecodePeer implements the Transport interface.
func (n *NetworkTransport) DecodePeer(buf []byte) ServerAddress {
	return ServerAddress(buf)
}

// TimeoutNow implements the Transport interface.
func (n *NetworkTransport) TimeoutNow(id ServerID, target ServerAddress, args *TimeoutNowRequest, resp *TimeoutNowResponse) error {
	return n.genericRPC(id, target, rpcTimeoutNow, args, resp)
}

// listen is used to handling incoming connections.
func (n *NetworkTransport) listen() {
	const baseDelay = 5 * time.Millisecond
	const maxDelay = 1 * time.Second

	var loopDelay time.Duration
	for {
		// Accept incoming connections
		conn, err := n.stream.Accept()
		if err != nil {
			if loopDelay == 0 {
				loopDelay = baseDelay
			} else {
				loopDelay *= 2
			}

			if loopDelay > maxDelay {
				loopDelay = maxDelay
			}

			if !n.IsShutdown() {
				n.logger.Error("failed to accept connection", "error", err)
			}

			select {
			case <-n.shutdownCh:
				return
			case <-time.After(loopDelay):
				continue
			}
		}
		// No error, reset loop delay
		loopDelay = 0
		// The connection belongs to the streams of the moment it was
		// accepted: a CloseStreams from now on ends it, even before its
		// handler has started.
		connCtx := n.getStreamContext()

		// At the cap, the new connection takes the place of the oldest
		// that has begun no RPC, or is closed at once: a flood of
		// connections must not use up the process's file descriptors, nor
		// silent ones lock peers out.
		ic := &inboundConn{conn: conn, peer: remoteHost(conn)}
		victim, ok := n.inbound.admit(ic, n.maxInbound)
		if !ok {
			if !n.IsShutdown() {
				n.refuse(reasonTooManyConnections, ic.peer,
					fmt.Errorf("%d inbound connections are open, the limit, and all have carried an rpc", n.maxInbound))
			}
			_ = conn.Close()
			continue
		}
		if victim != nil {
			_ = victim.conn.Close()
			what := "a connection that began no rpc"
			if victim.state == inboundWatcher {
				what = "a watcher connection"
			}
			n.refuse(reasonEvicted, victim.peer,
				fmt.Errorf("%d inbound connections are open, the limit: closed %s, the oldest, for one from %s", n.maxInbound, what, ic.peer))
		}

		n.logger.Debug("accepted connection", "local-address", n.LocalAddr(), "remote-address", conn.RemoteAddr().String())

		// Handle the connection in dedicated routine.
		go func() {
			defer n.inbound.remove(ic)
			n.handleConn(connCtx, ic)
		}()
	}
}

// handleConn is used to handle an inbound connection for its lifespan. The
// handler will exit when the passed context is cancelled or the connection is
// closed.
func (n *NetworkTransport) handleConn(connCtx context.Context, ic *inboundConn) {
	conn, peer := ic.conn, ic.peer
	defer func() { _ = conn.Close() }()
	r := bufio.NewReaderSize(conn, connReceiveBufferSize)
	w := bufio.NewWriter(conn)
	// The decoder reads requests through a guard that bounds each one.
	guard := &rpcGuard{r: r}
	dec := codec.NewDecoder(guard, &codec.MsgpackHandle{})

	mp := &codec.MsgpackHandle{}
	mp.TimeNotBuiltin = !n.msgpackUseNewTimeFormat
	enc := codec.NewEncoder(w, mp)

	ic.r, ic.guard, ic.dec, ic.enc = r, guard, dec, enc
	used := false // the connection has begun an RPC
	for {
		select {
		case <-connCtx.Done():
			n.logger.Debug("stream layer is closed")
			return
		default:
		}

		rpcType, getTypeStart, err := n.awaitRPC(ic, !used)
		if err == nil && !used {
			if rpcType == rpcWatch {
				n.holdWatcher(connCtx, ic)
				return
			}
			// From now on the connection is never evicted.
			if !n.inbound.mark(ic, inboundUsed) {
				return
			}
			used = true
		}
		if err == nil {
			err = n.handleCommand(ic, rpcType, getTypeStart)
		}
		if err != nil {
			if !used && n.inbound.wasEvicted(ic) {
				// Closed to make room, and counted then.
				return
			}
			var ref *refusal
			switch {
			case errors.As(err, &ref):
				n.refuse(ref.reason, peer, ref.err)
			case err == io.EOF || err == ErrTransportShutdown || err == errCloseConn:
			case peerHungUp(err):
				n.logger.Debug("peer closed the connection before its response", "peer", peer, "error", err)
			case isTimeout(err):
				n.refuse(reasonSlow, peer, fmt.Errorf("response not written within the deadline: %w", err))
			default:
				n.logger.Error("failed to handle incoming command", "error", err)
			}
			if err == errCloseConn {
				_ = w.Flush()
			}
			return
		}
		if err := w.Flush(); err != nil {
			if isTimeout(err) {
				n.refuse(reasonSlow, peer, fmt.Errorf("response not written within the deadline: %w", err))
			} else {
				n.logger.Error("failed to flush response", "error", err)
			}
			return
		}
	}
}

// awaitRPC waits for the first byte of the connection's next RPC, its
// type, at most IdleTimeout, and before the connection's first RPC at most
// FirstByteTimeout too. It returns when the wait began.
func (n *NetworkTransport) awaitRPC(ic *inboundConn, first bool) (uint8, time.Time, error) {
	wait, reason := n.idleTimeout, reasonIdle
	if first && n.firstByteTimeout > 0 && (wait <= 0 || n.firstByteTimeout <= wait) {
		wait, reason = n.firstByteTimeout, reasonFirstByte
	}
	start := time.Now()
	if wait > 0 {
		_ = ic.conn.SetReadDeadline(start.Add(wait))
	} else {
		// No bound: drop the previous RPC's.
		_ = ic.conn.SetReadDeadline(time.Time{})
	}
	rpcType, err := ic.r.ReadByte()
	if err != nil {
		if isTimeout(err) {
			if reason == reasonFirstByte {
				return 0, start, &refusal{reasonFirstByte, fmt.Errorf("no rpc begun within %s of the accept", wait)}
			}
			return 0, start, &refusal{reasonIdle, fmt.Errorf("no rpc within %s", wait)}
		}
		return 0, start, err
	}
	return rpcType, start, nil
}

// holdWatcher keeps a connection that announced itself a watcher (see
// rpcWatch) open, with no deadline, until its peer closes it, it is
// evicted, the transport shuts down or its streams are closed. A watcher
// sends nothing after its marker.
func (n *NetworkTransport) holdWatcher(connCtx context.Context, ic *inboundConn) {
	if !n.inbound.mark(ic, inboundWatcher) {
		return
	}
	n.logger.Debug("peer watches this node for its exit", "peer", ic.peer)
	_ = ic.conn.SetReadDeadline(time.Time{})
	stop := context.AfterFunc(connCtx, func() { _ = ic.conn.Close() })
	defer stop()
	if _, err := ic.r.ReadByte(); err == nil && !n.inbound.wasEvicted(ic) {
		n.refuse(reasonMalformed, ic.peer, errors.New("a watcher connection sent data after its marker"))
	}
}

// errCloseConn ends an inbound connection after its response: it cannot
// carry another RPC (InstallSnapshot's data stream follows its request).
var errCloseConn = errors.New("connection done")

// handleCommand decodes and dispatches a single command, whose type byte
// awaitRPC has read.
func (n *NetworkTransport) handleCommand(ic *inboundConn, rpcType uint8, getTypeStart time.Time) error {
	r, dec, enc := ic.r, ic.dec, ic.enc

	// From its first byte, the RPC has RPCTimeout to arrive, and its
	// encoded size is bounded.
	if n.rpcTimeout > 0 {
		_ = ic.conn.SetReadDeadline(time.Now().Add(n.rpcTimeout))
	} else {
		_ = ic.conn.SetReadDeadline(time.Time{})
	}
	ic.guard.reset(n.maxRPCSize)
	decode := func(v interface{}) error {
		if err := dec.Decode(v); err != nil {
			return classifyReadError(ic.guard, err)
		}
		return nil
	}

	// measuring the time to get the first byte separately because the heartbeat conn will hang out here
	// for a good while waiting for a heartbeat whereas the append entries/rpc conn should not.
	metrics.MeasureSince([]string{"raft", "net", "getRPCType"}, getTypeStart)
	decodeStart := time.Now()

	if rpcType == rpcPing {
		// Answered here: nothing of it reaches raft.
		var req pingMessage
		if err := decode(&req); err != nil {
			return err
		}
		if n.rpcTimeout > 0 {
			_ = ic.conn.SetWriteDeadline(time.Now().Add(n.rpcTimeout))
		}
		if err := enc.Encode(""); err != nil {
			return err
		}
		return enc.Encode(&pingMessage{})
	}

	// Create the RPC object
	respCh := make(chan RPCResponse, 1)
	rpc := RPC{
		RespChan: respCh,
	}

	// Decode the command
	var snapData *errorNotingReader
	isHeartbeat := false
	var labels []metrics.Label
	switch rpcType {
	case rpcAppendEntries:
		var req AppendEntriesRequest
		if err := decode(&req); err != nil {
			return err
		}
		rpc.Command = &req

		leaderAddr := req.Addr
		if len(leaderAddr) == 0 {
			leaderAddr = req.Leader
		}

		// Check if this is a heartbeat
		if req.Term != 0 && leaderAddr != nil &&
			req.PrevLogEntry == 0 && req.PrevLogTerm == 0 &&
			len(req.Entries) == 0 && req.LeaderCommitIndex == 0 {
			isHeartbeat = true
		}

		if isHeartbeat {
			labels = []metrics.Label{{Name: "rpcType", Value: "Heartbeat"}}
		} else {
			labels = []metrics.Label{{Name: "rpcType", Value: "AppendEntries"}}
		}
	case rpcRequestVote:
		var req RequestVoteRequest
		if err := decode(&req); err != nil {
			return err
		}
		rpc.Command = &req
		labels = []metrics.Label{{Name: "rpcType", Value: "RequestVote"}}
	case rpcRequestPreVote:
		var req RequestPreVoteRequest
		if err := decode(&req); err != nil {
			return err
		}
		rpc.Command = &req
		labels = []metrics.Label{{Name: "rpcType", Value: "RequestPreVote"}}
	case rpcInstallSnapshot:
		var req InstallSnapshotRequest
		if err := decode(&req); err != nil {
			return err
		}
		rpc.Command = &req
		if req.Size < 0 {
			return &refusal{reasonMalformed, fmt.Errorf("installSnapshot of %d bytes", req.Size)}
		}
		snapData = &errorNotingReader{r: io.LimitReader(r, req.Size)}
		rpc.Reader = snapData
		labels = []metrics.Label{{Name: "rpcType", Value: "InstallSnapshot"}}
	case rpcTimeoutNow:
		var req TimeoutNowRequest
		if err := decode(&req); err != nil {
			return err
		}
		rpc.Command = &req
		labels = []metrics.Label{{Name: "rpcType", Value: "TimeoutNow"}}
	default:
		return &refusal{reasonMalformed, fmt.Errorf("unknown rpc type %d", rpcType)}
	}

	metrics.MeasureSinceWithLabels([]string{"raft", "net", "rpcDecode"}, decodeStart, labels)

	// A term no node may hold is refused here: raft never sees it.
	if err := checkTerms(rpc.Command); err != nil {
		n.refuse(reasonBadTerm, ic.peer, err)
		if n.rpcTimeout > 0 {
			_ = ic.conn.SetWriteDeadline(time.Now().Add(n.rpcTimeout))
		}
		if err := enc.Encode(err.Error()); err != nil {
			return err
		}
		if err := enc.Encode(emptyResponse(rpcType)); err != nil {
			return err
		}
		if rpcType == rpcInstallSnapshot {
			return errCloseConn
		}
		return nil
	}

	// The snapshot's data stream gets the deadline once per TimeoutScale
	// bytes, as the sender does.
	if snapData != nil && n.rpcTimeout > 0 {
		scale := int64(1)
		if n.TimeoutScale > 0 {
			scale = rpc.Command.(*InstallSnapshotRequest).Size / int64(n.TimeoutScale)
		}
		scale = int64(min(max(uint64(scale), 1), 1<<20))
		_ = ic.conn.SetReadDeadline(time.Now().Add(n.rpcTimeout * time.Duration(scale)))
	}

	processStart := time.Now()

	// Check for heartbeat fast-path
	if isHeartbeat {
		n.heartbeatFnLock.Lock()
		fn := n.heartbeatFn
		n.heartbeatFnLock.Unlock()
		if fn != nil {
			fn(rpc)
			goto RESP
		}
	}

	// Dispatch the RPC
	select {
	case n.consumeCh <- rpc:
	case <-n.shutdownCh:
		return ErrTransportShutdown
	}

	// Wait for response
RESP:
	// we will differentiate the heartbeat fast path from normal RPCs with labels
	metrics.MeasureSinceWithLabels([]string{"raft", "net", "rpcEnqueue"}, processStart, labels)
	respWaitStart := time.Now()
	select {
	case resp := <-respCh:
		defer metrics.MeasureSinceWithLabels([]string{"raft", "net", "rpcRespond"}, respWaitStart, labels)
		if n.rpcTimeout > 0 {
			_ = ic.conn.SetWriteDeadline(time.Now().Add(n.rpcTimeout))
		}
		// Send the error first
		respErr := ""
		if resp.Error != nil {
			respErr = resp.Error.Error()
		}
		if err := enc.Encode(respErr); err != nil {
			return err
		}

		// Send the response
		if err := enc.Encode(resp.Response); err != nil {
			return err
		}
	case <-n.shutdownCh:
		return ErrTransportShutdown
	}
	if snapData != nil {
		if isTimeout(snapData.err) {
			n.refuse(reasonSlow, ic.peer, fmt.Errorf("snapshot data not read within the deadline: %w", snapData.err))
		}
		// Whatever raft left of the data stream is unread: the connection
		// cannot carry another RPC. Senders never reuse it.
		return errCloseConn
	}
	return nil
}

// decodeResponse is used to decode an RPC response and reports whether
// the connection can be reused. A response over MaxRPCSize or carrying a
// term that is not TermOK is refused: an error, and the connection closed.
func (n *NetworkTransport) decodeResponse(conn *netConn, resp interface{}) (bool, error) {
	conn.guard.reset(n.maxRPCSize)
	fail := func(err error) (bool, error) {
		_ = conn.Release()
		if conn.guard.err != nil {
			n.refuse(reasonTooLarge, string(conn.target), conn.guard.err)
			return false, fmt.Errorf("refused a response from %s: %w", conn.target, conn.guard.err)
		}
		return false, err
	}

	// Decode the error if any
	var rpcError string
	if err := conn.dec.Decode(&rpcError); err != nil {
		return fail(err)
	}

	// Decode the response
	if err := conn.dec.Decode(resp); err != nil {
		zeroResponse(resp)
		return fail(err)
	}

	if err := checkTerms(resp); err != nil {
		zeroResponse(resp)
		n.refuse(reasonBadTerm, string(conn.target), err)
		_ = conn.Release()
		return false, fmt.Errorf("refused a response from %s: %w", conn.target, err)
	}

	// Format an error if any
	if rpcError != "" {
		return true, errors.New(rpcError)
	}
	return true, nil
}

// sendRPC is used to encode and send the RPC.
func sendRPC(conn *netConn, rpcType uint8, args interface{}) error {
	// Write the request type
	if err := conn.w.WriteByte(rpcType); err != nil {
		_ = conn.Release()
		return err
	}

	// Send the request
	if err := conn.enc.Encode(args); err != nil {
		_ = conn.Release()
		return err
	}

	// Flush
	if err := conn.w.Flush(); err != nil {
		_ = conn.Release()
		return err
	}
	return nil
}

// newNetPipeline is used to construct a netPipeline from a given transport and
// connection. It is a bug to ever call this with maxInFlight less than 2
// (minInFlightForPipelining) and will cause a panic.
func newNetPipeline(trans *NetworkTransport, conn *netConn, maxInFlight int) *netPipeline {
	if maxInFlight < minInFlightForPipelining {
		// Shouldn't happen (tm) since we validate this in the one call site and
		// skip pipelining if it's lower.
		panic("pipelining makes no sense if maxInFlight < 2")
	}
	n := &netPipeline{
		conn:  conn,
		trans: trans,
		// The buffer size is 2 less than the configured max because we send before
		// waiting on the channel and the decode routine unblocks the channel as
		// soon as it's waiting on the first request. So a zero-buffered channel
		// still allows 1 request to be sent even while decode is still waiting for
		// a response from the previous one. i.e. two are inflight at the same time.
		inprogressCh: make(chan *appendFuture, maxInFlight-2),
		doneCh:       make(chan AppendFuture, maxInFlight-2),
		shutdownCh:   make(chan struct{}),
	}
	go n.decodeResponses()
	return n
}

// decodeResponses is a long running routine that decodes the responses
// sent on the connection.
func (n *netPipeline) decodeResponses() {
	timeout := n.trans.timeout
	for {
		select {
		case future := <-n.inprogressCh:
			if timeout > 0 {
				_ = n.conn.conn.SetReadDeadline(time.Now().Add(timeout))
			}

			_, err := n.trans.decodeResponse(n.conn, future.resp)
			future.respond(err)
			select {
			case n.doneCh <- future:
			case <-n.shutdownCh:
				return
			}
		case <-n.shutdownCh:
			return
		}
	}
}

// AppendEntries is used to pipeline a new append entries request.
func (n *netPipeline) AppendEntries(args *AppendEntriesRequest, resp *AppendEntriesResponse) (AppendFuture, error) {
	// Create a new future
	future := &appendFuture{
		start: time.Now(),
		args:  args,
		resp:  resp,
	}
	future.init()

	// Add a send timeout
	if timeout := n.trans.timeout; timeout > 0 {
		_ = n.conn.conn.SetWriteDeadline(time.Now().Add(timeout))
	}

	// Send the RPC
	if err := sendRPC(n.conn, rpcAppendEntries, future.args); err != nil {
		return nil, err
	}

	// Hand-off for decoding, this can also cause back-pressure
	// to prevent too many inflight requests
	select {
	case n.inprogressCh <- future:
		return future, nil
	case <-n.shutdownCh:
		return nil, ErrPipelineShutdown
	}
}

// Consumer returns a channel that can be used to consume complete futures.
func (n *netPipeline) Consumer() <-chan AppendFuture {
	return n.doneCh
}

// Close is used to shut down the pipeline connection.
func (n *netPipeline) Close() error {
	n.shutdownLock.Lock()
	defer n.shutdownLock.Unlock()
	if n.shutdown {
		return nil
	}

	// Release the connection
	_ = n.conn.Release()

	n.shutdown = true
	close(n.shutdownCh)
	return nil
}
