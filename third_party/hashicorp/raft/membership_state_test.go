// Copyright IBM Corp. 2013, 2025
// SPDX-License-Identifier: MPL-2.0

package raft

import (
	"testing"
	"time"
)

// The leader publishes each follower's progress, voter or not, and the
// configuration indexes; a follower publishes no progress.
func TestRaft_ProgressAndConfigurationState(t *testing.T) {
	c := MakeCluster(2, t, nil)
	defer c.Close()
	leader := c.Leader()
	for i := 0; i < 10; i++ {
		if err := leader.Apply([]byte("x"), time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	cs := leader.ConfigurationState()
	if cs.Pending() || cs.LatestIndex == 0 || len(cs.Latest.Servers) != 2 {
		t.Fatalf("configuration state %+v", cs)
	}
	for _, f := range c.Followers() {
		if p := f.Progress(); p != nil {
			t.Fatalf("follower reports progress %v", p)
		}
		if got := f.ConfigurationState(); got.LatestIndex != cs.LatestIndex {
			t.Fatalf("follower configuration index %d, leader %d", got.LatestIndex, cs.LatestIndex)
		}
	}

	c1 := MakeClusterNoBootstrap(1, t, nil)
	c.Merge(c1)
	c.FullyConnect()
	nv := c1.rafts[0]
	if err := leader.AddNonvoter(nv.localID, nv.localAddr, 0, time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if err := leader.Apply([]byte("y"), time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	last := leader.LastIndex()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p := leader.Progress()
		done := len(p) == 2
		for id, pr := range p {
			if pr.MatchIndex != last {
				done = false
			}
			if pr.LastContact.IsZero() {
				t.Fatalf("%s: no last contact", id)
			}
		}
		if done {
			if _, ok := p[nv.localID]; !ok {
				t.Fatalf("progress %v lacks the non-voter", p)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("progress %v never reached index %d", p, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cs = leader.ConfigurationState()
	if cs.Pending() || len(cs.Latest.Servers) != 3 || cs.Latest.Servers[2].Suffrage != Nonvoter {
		t.Fatalf("configuration state after adding a non-voter %+v", cs)
	}
}
