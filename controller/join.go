package controller

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"

	"github.com/xce/xce/client"
	"github.com/xce/xce/internal/backoff"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// Timings of the join loop.
const (
	// joinAttempt bounds one Join call.
	joinAttempt = 5 * time.Second
	// joinCheck is how often a node that was added looks for itself in
	// the configuration it follows.
	joinCheck = 250 * time.Millisecond
)

// inConfiguration reports whether this node is in the configuration it
// knows.
func (n *Node) inConfiguration() bool {
	m := n.membership()
	if m == nil {
		return false
	}
	members, _, _, err := m.Members()
	if err != nil {
		return false
	}
	for _, mb := range members {
		if mb.ID == n.cfg.NodeID {
			return true
		}
	}
	return false
}

// runJoin asks the cluster at addrs to add this node (docs/operations.md,
// "Adding a node") until the node sees itself in the configuration it
// follows, or ctx ends (the node stops). It calls ClusterService.Join as
// the node itself (its client certificate when the client port has TLS),
// follows a NOT_READY answer's leader hint, otherwise moves to the next
// address and backs off.
func (n *Node) runJoin(ctx context.Context, addrs []string) {
	log := n.log.With().Str("component", "join").Logger()
	creds := n.peerCallCredentials()
	tlsCfg, err := creds.TLSConfig()
	if err != nil {
		log.Error().Err(err).Msg("cannot join: no TLS configuration for the join addresses")
		return
	}
	hc := client.NewHTTPClient(tlsCfg)
	defer hc.CloseIdleConnections()
	scheme := "http://"
	if tlsCfg != nil {
		scheme = "https://"
	}
	self := n.cfg.Self()
	req := &xcev1.JoinRequest{Id: n.cfg.NodeID, PeerAddr: n.cfg.PeerAddr, ClientAddr: self.ClientAddr, ClusterId: n.cfg.ClusterID}
	log.Info().Strs("join", addrs).Str("peer_addr", req.PeerAddr).Str("client_addr", req.ClientAddr).
		Msg("empty data dir and join addresses: asking the cluster to add this node")
	bo := backoff.Backoff{Min: 200 * time.Millisecond, Max: 5 * time.Second}
	next, target, hops := 0, addrs[0], 0
	lastErr := ""
	for {
		if n.inConfiguration() {
			log.Info().Msg("this node is in the cluster's configuration: joined")
			return
		}
		actx, acancel := context.WithTimeout(ctx, joinAttempt)
		resp, err := xcev1connect.NewClusterServiceClient(hc, scheme+target).Join(actx, connect.NewRequest(req))
		acancel()
		if ctx.Err() != nil {
			return
		}
		wait := bo.Next()
		switch nr, isNotReady := client.NotReadyOf(err); {
		case err == nil:
			m := resp.Msg.GetMember()
			log.Info().Str("via", target).Bool("voter", m.GetVoter()).Msg("added to the configuration; waiting to receive it")
			bo.Reset()
			wait, hops = joinCheck, 0
		case isNotReady && nr.LeaderAddr != "" && nr.LeaderAddr != target && hops < 3:
			hops++
			log.Debug().Str("from", target).Str("to", nr.LeaderAddr).Msg("following the primary hint")
			target, wait = nr.LeaderAddr, 0
		default:
			hops = 0
			if msg := err.Error(); msg != lastErr {
				ev := log.Info()
				if final(err) {
					// Needs an operator: say so louder, keep trying.
					ev = log.Error()
				}
				ev.Err(err).Str("via", target).Dur("retry_in", wait).Msg("join refused or not answered; retrying")
				lastErr = msg
			}
			next = (next + 1) % len(addrs)
			target = addrs[next]
		}
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// final reports whether err is an answer that retrying alone will not
// change (a refusal, a conflicting member, another cluster).
func final(err error) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return false
	}
	switch ce.Code() {
	case connect.CodeInvalidArgument, connect.CodeAlreadyExists, connect.CodePermissionDenied, connect.CodeUnauthenticated:
		return true
	}
	return false
}
