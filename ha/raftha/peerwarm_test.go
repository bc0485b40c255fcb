package raftha

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/xce/xce/internal/testutil"
)

func TestAfterWarm(t *testing.T) {
	now := time.Unix(1000, 0)
	const every = 2 * time.Second
	tests := []struct {
		name    string
		in      peerWarmState
		outcome warmOutcome
		wait    time.Duration
		refused int
	}{
		{"warmed", peerWarmState{}, warmOK, every, 0},
		{"warmed after refusals", peerWarmState{refused: 5}, warmOK, every, 0},
		{"unreachable: soon again", peerWarmState{}, warmUnreachable, every, 0},
		{"unreachable after refusals", peerWarmState{refused: 3}, warmUnreachable, every, 0},
		{"first refusal", peerWarmState{}, warmRefused, every, 1},
		{"second refusal doubles", peerWarmState{refused: 1}, warmRefused, 2 * every, 2},
		{"third", peerWarmState{refused: 2}, warmRefused, 4 * every, 3},
		{"bounded", peerWarmState{refused: 40}, warmRefused, peerWarmMaxBackoff, 41},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := afterWarm(tt.in, now, tt.outcome, every)
			if got.next.Sub(now) != tt.wait || got.refused != tt.refused {
				t.Errorf("afterWarm(%+v, %v) = next in %v, refused %d; want %v, %d", tt.in, tt.outcome, got.next.Sub(now), got.refused, tt.wait, tt.refused)
			}
		})
	}
}

func TestOutcomeOf(t *testing.T) {
	refusedDial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	tests := []struct {
		err  error
		want warmOutcome
	}{
		{nil, warmOK},
		{refusedDial, warmUnreachable},
		{fmt.Errorf("peer tls: %w", refusedDial), warmUnreachable},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, warmRefused},
		{errors.New("unknown rpc type 253"), warmRefused},
	}
	for _, tt := range tests {
		if got := outcomeOf(tt.err); got != tt.want {
			t.Errorf("outcomeOf(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// Followers, which raft alone never connects to each other, hold warm
// connections to each other, so that an election needs no dial.
func TestPeerWarmConnectsTheFollowers(t *testing.T) {
	nodes := startWatchCluster(t, nil)
	leader := waitLeader(t, nodes, "", 20*time.Second)
	var f []*watchNode
	for _, n := range nodes {
		if n != leader {
			f = append(f, n)
		}
	}
	testutil.Eventually(t, 10*time.Second, "warm connections between the followers", func() bool {
		return f[0].r.trans.PooledConns(raft.ServerAddress(f[1].addr)) >= 1 &&
			f[1].r.trans.PooledConns(raft.ServerAddress(f[0].addr)) >= 1
	})
	for _, n := range nodes {
		if s := n.r.trans.TransportStats(); s.Total() != 0 {
			t.Errorf("%s: transport stats %+v, want no refusal", n.id, s)
		}
	}
}
