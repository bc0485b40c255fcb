package raft

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// campaignGate is a Config.CampaignAllowed that refuses while set and
// counts how often it was asked.
type campaignGate struct {
	refuse atomic.Pointer[error]
	asked  atomic.Int64
}

func (g *campaignGate) allowed() error {
	g.asked.Add(1)
	if p := g.refuse.Load(); p != nil {
		return *p
	}
	return nil
}

func (g *campaignGate) set(err error) {
	if err == nil {
		g.refuse.Store(nil)
		return
	}
	g.refuse.Store(&err)
}

var errDiskFull = errors.New("storage failing: no space left on device")

// A single node whose gate refuses neither campaigns nor moves its term;
// it is asked at each heartbeat timeout. Once the gate allows, it elects
// itself.
func TestCampaignGate_SingleNode(t *testing.T) {
	gate := &campaignGate{}
	gate.set(errDiskFull)
	conf := inmemConfig(t)
	conf.CampaignAllowed = gate.allowed
	r := startSingle(t, conf, nil)
	term := r.getCurrentTerm()
	pollFor(t, 10*time.Second, "the gate to be asked at several timeouts", func() bool {
		if got := r.getCurrentTerm(); got != term {
			t.Fatalf("term moved from %d to %d while the gate refused", term, got)
		}
		if s := r.State(); s != Follower {
			t.Fatalf("state %v while the gate refused", s)
		}
		return gate.asked.Load() >= 5
	})
	gate.set(nil)
	pollFor(t, 10*time.Second, "a leader once the gate allows", func() bool { return r.State() == Leader })
	if err := r.Apply([]byte("x"), time.Second).Error(); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

// makeGatedCampaignCluster is a three-node cluster with a campaign gate
// and a log store that can be made to fail on every node.
func makeGatedCampaignCluster(t *testing.T, parallelWrites bool) (*cluster, []*campaignGate, []*gateStore) {
	t.Helper()
	gates := []*campaignGate{{}, {}, {}}
	var stores []*gateStore
	conf := inmemConfig(t)
	conf.ParallelLeaderWrites = parallelWrites
	c := MakeClusterCustom(t, &MakeClusterOpts{
		Peers: 3, Bootstrap: true, Conf: conf,
		PeerConf: func(i int, c *Config) { c.CampaignAllowed = gates[i].allowed },
		WrapLogStore: func(_ int, s LogStore) LogStore {
			g := newGateStore(s)
			stores = append(stores, g)
			return g
		},
	})
	t.Cleanup(c.Close)
	return c, gates, stores
}

// The leader's disk fails and its gate refuses: its write fails, it steps
// down and stays a follower, a healthy node leads, and the term stops
// moving while that leader serves writes. Once the disk and the gate
// recover, the old leader catches up.
func TestCampaignGate_LeaderDiskFails(t *testing.T) {
	for _, parallel := range []bool{false, true} {
		t.Run(fmt.Sprintf("ParallelLeaderWrites=%v", parallel), func(t *testing.T) {
			c, gates, stores := makeGatedCampaignCluster(t, parallel)
			old := c.Leader()
			oi := c.IndexOf(old)
			gates[oi].set(errDiskFull)
			stores[oi].failNext(1 << 30)
			if err := old.Apply([]byte("lost"), time.Second).Error(); err == nil {
				t.Fatal("apply on the leader with a failing disk succeeded")
			}

			var leader *Raft
			pollFor(t, 10*time.Second, "a healthy leader", func() bool {
				for _, r := range c.rafts {
					if r != old && r.State() == Leader {
						leader = r
						return true
					}
				}
				return false
			})
			term := leader.getCurrentTerm()
			// The new leader serves; meanwhile nobody moves the term.
			deadline := time.Now().Add(20 * c.conf.HeartbeatTimeout)
			for n := 0; time.Now().Before(deadline) || n < 20; n++ {
				if err := leader.Apply([]byte(fmt.Sprintf("w%d", n)), time.Second).Error(); err != nil {
					t.Fatalf("apply %d on the new leader: %v", n, err)
				}
				for _, r := range c.rafts {
					if got := r.getCurrentTerm(); got != term {
						t.Fatalf("%s moved to term %d from %d", r.localID, got, term)
					}
				}
				if s := old.State(); s != Follower {
					t.Fatalf("the failed leader is %v", s)
				}
			}

			stores[oi].failNext(0)
			gates[oi].set(nil)
			want := leader.getLastIndex()
			pollFor(t, 30*time.Second, "the old leader to catch up", func() bool { return old.getLastIndex() >= want })
		})
	}
}

// A node whose gate refuses turns down a TimeoutNow: a leadership transfer
// to it fails, and nothing changes.
func TestCampaignGate_TimeoutNowRefused(t *testing.T) {
	c, gates, _ := makeGatedCampaignCluster(t, false)
	leader := c.Leader()
	var target *Raft
	for _, r := range c.rafts {
		if r != leader {
			target = r
			break
		}
	}
	gates[c.IndexOf(target)].set(errDiskFull)
	term := leader.getCurrentTerm()
	if err := leader.LeadershipTransferToServer(target.localID, target.localAddr).Error(); err == nil {
		t.Fatal("leadership transfer to a node that may not campaign succeeded")
	}
	if s := target.State(); s != Follower {
		t.Errorf("target is %v", s)
	}
	if leader.State() != Leader || leader.getCurrentTerm() != term {
		t.Errorf("leader is %v in term %d, was leader in %d", leader.State(), leader.getCurrentTerm(), term)
	}
}

// A candidate whose gate starts refusing steps back to follower at its
// next election timeout and stays there.
func TestCampaignGate_CandidateStepsBack(t *testing.T) {
	c, gates, _ := makeGatedCampaignCluster(t, false)
	leader := c.Leader()
	var cut *Raft
	for _, r := range c.rafts {
		if r != leader {
			cut = r
			break
		}
	}
	ci := c.IndexOf(cut)
	// Cut off, its pre-votes fail and it stays a candidate.
	c.Disconnect(cut.localAddr)
	pollFor(t, 10*time.Second, "the cut-off node to campaign", func() bool { return cut.State() == Candidate })
	gates[ci].set(errDiskFull)
	asked := gates[ci].asked.Load()
	pollFor(t, 10*time.Second, "the candidate to step back", func() bool { return cut.State() == Follower })
	term := cut.getCurrentTerm()
	pollFor(t, 10*time.Second, "the gate to be asked at several timeouts", func() bool {
		if s := cut.State(); s != Follower {
			t.Fatalf("state %v while the gate refused", s)
		}
		if got := cut.getCurrentTerm(); got != term {
			t.Fatalf("term moved from %d to %d while the gate refused", term, got)
		}
		return gates[ci].asked.Load() >= asked+5
	})
	gates[ci].set(nil)
	c.FullyConnect()
	pollFor(t, 10*time.Second, "one leader", func() bool {
		n := 0
		for _, r := range c.rafts {
			if r.State() == Leader {
				n++
			}
		}
		return n == 1
	})
}
