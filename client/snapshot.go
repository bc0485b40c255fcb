package client

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"

	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// SnapshotStream is a snapshot as the primary streams it: the header
// fields, then the data through Read, then the size and checksum the
// primary computed (Trailer), for the caller to check what it received
// against.
type SnapshotStream struct {
	Format    uint32
	ClusterID string
	Index     uint64
	Term      uint64

	stream  *connect.ServerStreamForClient[xcev1.SnapshotChunk]
	cancel  context.CancelFunc
	pending []byte
	size    uint64
	sha     string
	eof     bool
}

func (c *Client) snapshotSvc(ep string) xcev1connect.ClusterServiceClient {
	return xcev1connect.NewClusterServiceClient(c.http, c.scheme+ep, c.connect...)
}

// OpenSnapshot asks the cluster's primary for a consistent snapshot. It is
// retried like every call (following leader hints, through elections)
// until the first message arrives; from then on the stream lives as long
// as ctx, however long the data takes, and a failure ends it for good.
// The caller closes the stream.
func (c *Client) OpenSnapshot(ctx context.Context) (*SnapshotStream, error) {
	var out *SnapshotStream
	err := retry(ctx, c, c.snapshotSvc, func(actx context.Context, s xcev1connect.ClusterServiceClient) error {
		sctx, cancel := context.WithCancel(ctx)
		// Until the header arrives an attempt is bounded like any other.
		stop := context.AfterFunc(actx, cancel)
		stream, err := s.SaveSnapshot(sctx, connect.NewRequest(&xcev1.SaveSnapshotRequest{}))
		if err != nil {
			cancel()
			return err
		}
		if !stream.Receive() {
			err := stream.Err()
			stream.Close()
			cancel()
			if err == nil {
				err = connect.NewError(connect.CodeUnavailable, errors.New("snapshot stream ended before its header"))
			}
			return err
		}
		if !stop() {
			stream.Close()
			cancel()
			return actx.Err()
		}
		m := stream.Msg()
		out = &SnapshotStream{Format: m.Format, ClusterID: m.ClusterId, Index: m.Index, Term: m.Term,
			stream: stream, cancel: cancel, pending: m.Data}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SnapshotTaken is a raft snapshot the primary took on demand: the last
// index it holds, its size, and the primary's time from asking raft for
// it to its being persisted.
type SnapshotTaken struct {
	Index, Bytes uint64
	Seconds      float64
}

// TakeSnapshot has the cluster's primary take a raft snapshot now and
// returns once it is persisted. It is retried like every call, except that
// the attempt that reaches the primary lasts as long as ctx rather than
// the AttemptTimeout: a large state takes longer to write out, and
// abandoning the attempt would only start a second snapshot.
func (c *Client) TakeSnapshot(ctx context.Context) (SnapshotTaken, error) {
	var out SnapshotTaken
	err := retry(ctx, c, c.snapshotSvc, func(_ context.Context, s xcev1connect.ClusterServiceClient) error {
		r, err := s.TakeSnapshot(ctx, connect.NewRequest(&xcev1.TakeSnapshotRequest{}))
		if err != nil {
			return err
		}
		out = SnapshotTaken{Index: r.Msg.Index, Bytes: r.Msg.Bytes, Seconds: r.Msg.Seconds}
		return nil
	})
	return out, err
}

// Read reads the snapshot's data; it returns io.EOF after the last
// message, and the stream's error if it ends before that.
func (s *SnapshotStream) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		if s.eof {
			return 0, io.EOF
		}
		if !s.stream.Receive() {
			if err := s.stream.Err(); err != nil {
				return 0, fmt.Errorf("snapshot stream: %w", mapErr(err))
			}
			return 0, fmt.Errorf("snapshot stream: %w", io.ErrUnexpectedEOF)
		}
		m := s.stream.Msg()
		s.pending = m.Data
		if m.Sha256 != "" {
			s.size, s.sha, s.eof = m.Size, m.Sha256, true
		}
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// Trailer is the size and SHA-256 (hex) of the data as the primary sent
// it; set once Read returned io.EOF.
func (s *SnapshotStream) Trailer() (size uint64, sha256 string) { return s.size, s.sha }

// Close ends the stream.
func (s *SnapshotStream) Close() error {
	err := s.stream.Close()
	s.cancel()
	return err
}
