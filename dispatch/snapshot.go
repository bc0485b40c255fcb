package dispatch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"time"

	"connectrpc.com/connect"

	"github.com/xce/xce/backup"
	"github.com/xce/xce/ha"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// snapshotChunkBytes is the most data one SnapshotChunk carries.
const snapshotChunkBytes = 1 << 20

// SaveSnapshot streams a consistent snapshot of the state (docs/design.md,
// "Backup and restore"). The gate lets it run only on the primary with
// write quorum; the read barrier makes the state it copies include every
// write acknowledged before the call. The first message carries the
// header (format, cluster, index, term), the following ones the data, the
// last one the size and SHA-256 of the data. The copy is taken under the
// state machine's lock and written out without it, so a slow reader holds
// up nothing but its own stream (which netio bounds per write).
func (c *clusterService) SaveSnapshot(ctx context.Context, _ *connect.Request[xcev1.SaveSnapshotRequest], stream *connect.ServerStream[xcev1.SnapshotChunk]) error {
	s := c.s
	if err := s.node.ReadBarrier(ctx); err != nil {
		return s.applyErr(err)
	}
	snap := s.node.FSM().Snapshot()
	defer snap.Release()
	// Read after the copy: a term no older than any entry the copy holds.
	term := s.node.View().Term
	if err := stream.Send(&xcev1.SnapshotChunk{
		Format: backup.Version, ClusterId: s.node.Config().ClusterID, Index: snap.AppliedIndex(), Term: term,
	}); err != nil {
		return err
	}
	w := &chunkWriter{send: stream.Send, sum: sha256.New(), buf: make([]byte, 0, snapshotChunkBytes)}
	if err := snap.Write(w); err != nil {
		return err
	}
	if err := w.flush(); err != nil {
		return err
	}
	return stream.Send(&xcev1.SnapshotChunk{Sha256: hex.EncodeToString(w.sum.Sum(nil)), Size: w.n})
}

// TakeSnapshot has the primary take a raft snapshot now, the one it takes
// every raft.snapshot_interval, and answers once it is persisted
// (docs/operations.md, "Snapshots"): `xce bench --snapshot-at` measures
// what one costs the writes under load.
func (c *clusterService) TakeSnapshot(ctx context.Context, _ *connect.Request[xcev1.TakeSnapshotRequest]) (*connect.Response[xcev1.TakeSnapshotResponse], error) {
	start := time.Now()
	info, err := c.s.node.TakeSnapshot(ctx)
	if errors.Is(err, ha.ErrNothingToSnapshot) {
		return nil, failedPrecondition("%v", err)
	}
	if err != nil {
		return nil, c.memberErr(err)
	}
	return connect.NewResponse(&xcev1.TakeSnapshotResponse{
		Index: info.Index, Bytes: info.Bytes, Seconds: time.Since(start).Seconds(),
	}), nil
}

// chunkWriter sends what is written to it in chunks of at most
// snapshotChunkBytes, hashing it on the way.
type chunkWriter struct {
	send func(*xcev1.SnapshotChunk) error
	sum  hash.Hash
	buf  []byte
	n    uint64
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		k := min(len(p), cap(w.buf)-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p, written = p[k:], written+k
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// flush sends the buffered data, if any. The message is marshalled by
// Send before it returns, so the buffer is reused.
func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	w.sum.Write(w.buf)
	w.n += uint64(len(w.buf))
	err := w.send(&xcev1.SnapshotChunk{Data: w.buf})
	w.buf = w.buf[:0]
	return err
}
