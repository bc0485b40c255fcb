package controller

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
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
// without batch entries (the Kafka backend) has nothing to gate: it has no
// configuration of voters to ask, and drains are written at once (its
// members must all run a binary that applies them; docs/operations.md).
// Member commands (log format 3), worker drains (4), placement freezes
// and weighted submits (5), and worker addresses (6) are gated the same
// way once batches are on.
func (g batchGate) Run(ctx context.Context, _ uint64) error {
	b, ok := g.n.batcher()
	if !ok {
		g.n.drains.Store(nil)
		g.n.placement.Store(nil)
		g.n.workerAddrs.Store(nil)
		return nil
	}
	defer b.SetBatches(false)
	g.n.runBatchGate(ctx, b)
	if g.n.membership() != nil {
		g.n.runFormatGates(ctx,
			formatGate{format: state.LogFormatMembers, what: "member records", open: &g.n.members.cmds},
			formatGate{format: state.LogFormatDrain, what: "worker drains", open: &g.n.drains},
			formatGate{format: state.LogFormatPlacement, what: "placement freezes and task weights", open: &g.n.placement},
			formatGate{format: state.LogFormatWorkerAddrs, what: "worker addresses", open: &g.n.workerAddrs})
	} else {
		g.n.drains.Store(nil)
		g.n.placement.Store(nil)
		g.n.workerAddrs.Store(nil)
	}
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
// asks the current voters (the configuration's, at their client addresses)
// until they all agree or ctx ends (the term's leadership ends);
// batchGate.Run turns batches off when the term ends. Downgrading a node below log format 2 once
// batches were written is not supported: the log it catches up from may
// hold them.
func (n *Node) runBatchGate(ctx context.Context, b batcher) {
	if len(n.otherVoters()) == 0 {
		b.SetBatches(true)
		return
	}
	cl, err := n.statusClient()
	if err != nil {
		n.log.Warn().Err(err).Msg("batch entries stay off: no client for the voters")
		return
	}
	defer cl.CloseIdleConnections()
	tick := time.NewTicker(batchGatePoll)
	defer tick.Stop()
	var lastMissing string
	for {
		voters := n.otherVoters()
		old, silent := n.votersBelow(ctx, cl, voters, state.LogFormatBatch)
		// A voter that does not answer (down, restarting) holds the gate
		// only until the log holds a batch entry: from then on every voter
		// that catches up must apply them anyway.
		if len(old) == 0 && (len(silent) == 0 || n.fsm.AppliedBatch()) {
			b.SetBatches(true)
			n.log.Info().Int("voters", len(voters)+1).Strs("not_answering", silent).Msg("every voter applies batch entries: writes go to raft in batches")
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

// A format gate allows, in this term, commands of a log format newer than
// the first: member records (state's log format 3), worker drains (4),
// placement freezes and weighted submits (5), and worker addresses (6).
// A voter on an older binary would stop at such an entry, so the PRIMARY
// writes one only once every voter answered with a log format that applies
// it. Unlike batches, a voter that does not answer holds the gate for good:
// these commands are not urgent (the configuration changes without member
// records, and a drain can wait), and the leader writes the missing records
// when it can.
type formatGate struct {
	format uint32
	what   string // the commands, for the log and the refusal
	open   *atomic.Pointer[string]
}

// runFormatGates opens each gate in turn, each once every voter applies its
// format, until ctx ends.
func (n *Node) runFormatGates(ctx context.Context, gates ...formatGate) {
	cl, err := n.statusClient()
	if err != nil {
		n.log.Warn().Err(err).Msg("member records and drains stay off: no client for the voters")
		return
	}
	defer cl.CloseIdleConnections()
	tick := time.NewTicker(batchGatePoll)
	defer tick.Stop()
	var lastMissing string
	for _, g := range gates {
		for {
			old, silent := n.votersBelow(ctx, cl, n.otherVoters(), g.format)
			missing := strings.Join(append(old, silent...), ", ")
			if missing == "" {
				g.open.Store(nil)
				n.log.Info().Msgf("every voter applies %s (log format %d): they are written", g.what, g.format)
				break
			}
			why := fmt.Sprintf("%s wait until every voter applies them (log format %d): %s", g.what, g.format, missing)
			g.open.Store(&why)
			if missing != lastMissing {
				n.log.Info().Str("voters", missing).Msgf("%s stay off until these voters apply them (log format %d)", g.what, g.format)
				lastMissing = missing
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}
}

// votersBelow asks each voter for its status and returns those that
// answered with a log format below format and those that did not answer
// (or have no client address known).
func (n *Node) votersBelow(ctx context.Context, cl *client.Client, voters []voterAddr, format uint32) (old, silent []string) {
	for _, v := range voters {
		if v.addr == "" {
			silent = append(silent, fmt.Sprintf("%s (no client address known)", v.id))
			continue
		}
		actx, cancel := context.WithTimeout(ctx, batchGatePoll)
		s, err := cl.Status(actx, v.addr)
		cancel()
		switch {
		case err != nil:
			silent = append(silent, fmt.Sprintf("%s (no answer: %v)", v.addr, err))
		case s.LogFormat < format:
			old = append(old, fmt.Sprintf("%s %s (log format %d, version %q)", s.NodeId, v.addr, s.LogFormat, s.Version))
		}
	}
	return old, silent
}

// statusClient asks other nodes for their status (Client.Status names the
// node asked; the client's own endpoint is never called).
func (n *Node) statusClient() (*client.Client, error) {
	return client.New([]string{n.cfg.ClientAddr}, client.Options{Credentials: n.peerCallCredentials()})
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
