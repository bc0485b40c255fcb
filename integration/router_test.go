package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// TestRouterFollowsTheAssignment: a client.Router answers, from memory,
// each task's active worker, its address and epoch as the cluster has
// them (a STANDBY's STALE watch has the addresses too), through a worker's death, tasks moved by a drain and a SIGKILL of
// the primary; with every node down it keeps answering from its last
// table and says it is stale.
func TestRouterFollowsTheAssignment(t *testing.T) {
	const tasks = 6
	c, ws := placementCluster(t, tasks)
	settledPlacement(t, c, tasks, []string{"w1", "w2", "w3"}, raceSlack(30*time.Second))
	cl := c.Client()
	r := client.NewRouter(cl, false)
	defer r.Close()
	select {
	case <-r.Ready():
	case <-time.After(raceSlack(10 * time.Second)):
		t.Fatal("the router has no table 10s after it started")
	}
	agrees := func(what string) {
		t.Helper()
		var last string
		ok := testutil.Poll(raceSlack(30*time.Second), 20*time.Millisecond, func() error {
			a, err := c.assignment()
			if err != nil {
				return err
			}
			for _, ta := range a.Tasks {
				p := ta.Placement
				got, ok := r.Lookup(p.TaskId)
				want := client.Route{Worker: p.Active, Epoch: p.Epoch, Role: "active"}
				if p.Active != "" {
					want.Addr = p.Active + ".workers.test:7000"
				}
				if !ok || got.Worker != want.Worker || got.Addr != want.Addr || got.Epoch != want.Epoch || got.Role != want.Role {
					last = fmt.Sprintf("%s: router %+v (%v), cluster %+v", p.TaskId, got, ok, want)
					return fmt.Errorf("%s", last)
				}
			}
			return nil
		})
		if ok != nil {
			t.Fatalf("%s: the router does not agree with the cluster: %v", what, ok)
		}
	}
	agrees("settled")
	standbyKnowsAddrs(t, c, []string{"w1", "w2", "w3"})

	ws.kill("w3")
	settledPlacement(t, c, tasks, []string{"w1", "w2"}, itSessionTimeout+raceSlack(30*time.Second))
	agrees("w3 dead")

	ctx, cancel := context.WithTimeout(context.Background(), raceSlack(20*time.Second))
	if _, err := cl.DrainWorker(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	cancel()
	testutil.Eventually(t, raceSlack(30*time.Second), "w1's actives move to w2", func() bool {
		a, err := c.assignment()
		return err == nil && len(activesOf(placements(a), "w1")) == 0
	})
	agrees("w1 drained")

	p := c.WaitRoles(raceSlack(5 * time.Second))
	c.Kill(p)
	c.WaitRoles(raceSlack(15 * time.Second))
	agrees("after a SIGKILL of the primary")

	gen, _ := r.Generation()
	for _, i := range c.Live() {
		c.Kill(i)
	}
	testutil.Eventually(t, raceSlack(10*time.Second), "the router says it is stale", func() bool {
		_, stale := r.Generation()
		return stale
	})
	if g, _ := r.Generation(); g != gen {
		t.Fatalf("generation %d with every node down, was %d", g, gen)
	}
	if _, ok := r.Lookup("t00"); !ok {
		t.Fatal("with every node down the router no longer answers")
	}
}

// standbyKnowsAddrs waits until a STALE watch on a STANDBY alone gets the
// workers' addresses (from its log) with its full copy.
func standbyKnowsAddrs(t *testing.T, c *Cluster, workers []string) {
	t.Helper()
	p := c.WaitRoles(raceSlack(5 * time.Second))
	var standby string
	for _, i := range c.Live() {
		if i != p {
			standby = c.Addrs()[i]
			break
		}
	}
	cl := c.ClientOf(standby)
	err := testutil.Poll(raceSlack(30*time.Second), 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), raceSlack(5*time.Second))
		defer cancel()
		var got client.AssignmentUpdate
		err := cl.WatchAssignment(ctx, 0, true, func(u client.AssignmentUpdate) error {
			got = u
			return errGotOne
		})
		if err != errGotOne {
			return fmt.Errorf("watch on %s: %v", standby, err)
		}
		if got.Role != xcev1.Role_ROLE_STANDBY {
			return fmt.Errorf("%s answered as %v", got.Endpoint, got.Role)
		}
		for _, w := range workers {
			if a := got.WorkerAddrs[w]; a != w+".workers.test:7000" {
				return fmt.Errorf("STANDBY %s: worker addresses %v", standby, got.WorkerAddrs)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

var errGotOne = errors.New("got one")
