package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/state"
)

// batcher is a backend that can write batch entries (the raft backend).
type batcher interface{ SetBatches(on bool) }

// batcher returns the backend when it can write batch entries.
func (n *Node) batcher() (batcher, bool) {
	bx := n.backend.Load()
	if bx == nil {
		return nil, false
	}
	b, ok := bx.Backend.(batcher)
	return b, ok
}

// batchGate is the leader-only service that runs the gate for a term (the
// first of the term's services) and turns batch entries off when the term
// ends.
type batchGate struct{ n *Node }

func (batchGate) Name() string { return "batch-gate" }

// Run runs the gate, then holds batch entries on until ctx ends. A backend
// without batch entries (the Kafka backend) has nothing to gate.
func (g batchGate) Run(ctx context.Context, _ uint64) error {
	b, ok := g.n.batcher()
	if !ok {
		return nil
	}
	defer b.SetBatches(false)
	g.n.runBatchGate(ctx, b)
	<-ctx.Done()
	return nil
}

// batchGatePoll is how often the gate asks the voters again until all of
// them apply batch entries.
const batchGatePoll = time.Second

// runBatchGate turns batch entries on for this term once every voter
// reports a binary that applies them (log format 2 or more in its status),
// so a cluster in the middle of a rolling upgrade from a binary without
// them keeps writing entries its old nodes can apply. A voter that does not
// answer counts as old until this node has applied a batch entry. The gate
// asks until they all agree or ctx ends (the term's leadership ends);
// batchGate.Run turns batches off when the term ends. Downgrading a node below log format 2 once
// batches were written is not supported: the log it catches up from may
// hold them.
func (n *Node) runBatchGate(ctx context.Context, b batcher) {
	var others []string
	for _, p := range n.cfg.Peers {
		if p.ID != n.cfg.NodeID {
			others = append(others, p.ClientAddr)
		}
	}
	if len(others) == 0 {
		b.SetBatches(true)
		return
	}
	cl, err := client.New(others, client.Options{Credentials: n.peerCallCredentials()})
	if err != nil {
		n.log.Warn().Err(err).Msg("batch entries stay off: no client for the voters")
		return
	}
	defer cl.CloseIdleConnections()
	tick := time.NewTicker(batchGatePoll)
	defer tick.Stop()
	var lastMissing string
	for {
		old, silent := n.votersWithoutBatches(ctx, cl, others)
		// A voter that does not answer (down, restarting) holds the gate
		// only until the log holds a batch entry: from then on every voter
		// that catches up must apply them anyway.
		if len(old) == 0 && (len(silent) == 0 || n.fsm.AppliedBatch()) {
			b.SetBatches(true)
			n.log.Info().Int("voters", len(others)+1).Strs("not_answering", silent).Msg("every voter applies batch entries: writes go to raft in batches")
			return
		}
		if m := strings.Join(append(old, silent...), ", "); m != lastMissing {
			n.log.Info().Str("voters", m).Msg("batch entries stay off until these voters apply them (log format 2)")
			lastMissing = m
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// votersWithoutBatches asks each address for its status and returns those
// that answered with a log format below 2 and those that did not answer.
func (n *Node) votersWithoutBatches(ctx context.Context, cl *client.Client, addrs []string) (old, silent []string) {
	for _, addr := range addrs {
		actx, cancel := context.WithTimeout(ctx, batchGatePoll)
		s, err := cl.Status(actx, addr)
		cancel()
		switch {
		case err != nil:
			silent = append(silent, fmt.Sprintf("%s (no answer: %v)", addr, err))
		case s.LogFormat < state.LogFormatBatch:
			old = append(old, fmt.Sprintf("%s %s (log format %d, version %q)", s.NodeId, addr, s.LogFormat, s.Version))
		}
	}
	return old, silent
}

// peerCallCredentials are what this node presents when it calls another
// node's client port: with TLS there, its own certificate (a node of the
// cluster may read status), verified against the cluster's CA.
func (n *Node) peerCallCredentials() client.Credentials {
	t := n.cfg.TLS
	if t.CertFile == "" {
		return client.Credentials{}
	}
	ca := t.CAFile
	if ca == "" {
		ca = n.cfg.PeerTLS.CAFile
	}
	return client.Credentials{CAFile: ca, CertFile: t.CertFile, KeyFile: t.KeyFile}
}
