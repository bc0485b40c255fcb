package raft

import (
	"testing"
	"time"
)

// Replication to a follower that was unreachable long enough for its
// backoff to grow to seconds resumes as soon as a heartbeat reaches the
// follower again, not when that backoff ends.
func TestReplicationResumesWhenThePeerAnswers(t *testing.T) {
	conf := inmemConfig(t)
	c := MakeCluster(3, t, conf)
	t.Cleanup(c.Close)
	leader := c.Leader()
	follower := c.Followers()[0]
	c.Disconnect(follower.localAddr)
	// Writes while it is away: each attempt to send them fails, and the
	// wait between attempts doubles (10 ms, 20 ms, …): the attempt after
	// 2.56 s waits 2.56 s more, past the reconnection at 3.5 s.
	deadline := time.Now().Add(3500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if err := leader.Apply([]byte("x"), time.Second).Error(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := leader.LastIndex()
	c.FullyConnect()
	back := time.Now()
	for follower.getLastIndex() < want {
		if time.Since(back) > 10*conf.HeartbeatTimeout {
			t.Fatalf("the follower is at %d of %d %v after it was reachable again (heartbeats retry every %v)",
				follower.getLastIndex(), want, time.Since(back), conf.HeartbeatTimeout/2)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("caught up %v after it was reachable again", time.Since(back))
}

// A cluster whose nodes start together elects after FirstElectionTimeout,
// not after the heartbeat timeout.
func TestFirstElectionTimeout(t *testing.T) {
	conf := inmemConfig(t)
	conf.HeartbeatTimeout, conf.ElectionTimeout, conf.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
	conf.FirstElectionTimeout = 20 * time.Millisecond
	start := time.Now()
	c := MakeCluster(3, t, conf)
	t.Cleanup(c.Close)
	// The new leader's first entry was appended when it was elected.
	leader := c.Leader()
	term := leader.getCurrentTerm()
	var elected time.Time
	for i := uint64(1); i <= leader.getLastIndex(); i++ {
		var l Log
		if err := leader.logs.GetLog(i, &l); err == nil && l.Term == term {
			elected = l.AppendedAt
			break
		}
	}
	if took := elected.Sub(start); elected.IsZero() || took > conf.HeartbeatTimeout/2 {
		t.Fatalf("elected %v after the start, with a first election timeout of %v and a heartbeat timeout of %v",
			took, conf.FirstElectionTimeout, conf.HeartbeatTimeout)
	}
	t.Logf("elected %v after the start", elected.Sub(start))
}
