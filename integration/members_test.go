package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// withShortStabilization promotes a caught-up non-voter after a second
// rather than the default ten, so that the tests wait less.
func withShortStabilization() Option {
	return WithConfig(func(cfg *configs.Config) {
		cfg.Autopilot.StabilizationTime = configs.Duration{Duration: time.Second}
	})
}

// AddNode lays out and starts one more node that joins the cluster through
// the client addresses of the running nodes; it returns its index.
func (c *Cluster) AddNode() int {
	c.t.Helper()
	var join []string
	for _, i := range c.Live() {
		join = append(join, c.nodes[i].ClientAddr)
	}
	i, err := c.lc.AddNode(join)
	if err != nil {
		c.t.Fatalf("add node: %v", err)
	}
	c.nodes = c.lc.Nodes
	c.Start(i)
	return i
}

// Members lists the members through the PRIMARY.
func (c *Cluster) Members(cl *client.Client) ([]*xcev1.Member, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.ListMembers(ctx, false)
	if err != nil {
		return nil, err
	}
	return resp.Members, nil
}

// waitMembers polls until the configuration's voters and non-voters are
// exactly the given ids.
func (c *Cluster) waitMembers(cl *client.Client, timeout time.Duration, voters, nonvoters []string) []*xcev1.Member {
	c.t.Helper()
	var last []*xcev1.Member
	err := testutil.Poll(timeout, pollEvery, func() error {
		ms, err := c.Members(cl)
		if err != nil {
			return err
		}
		last = ms
		var v, nv []string
		for _, m := range ms {
			if m.Voter {
				v = append(v, m.Id)
			} else {
				nv = append(nv, m.Id)
			}
		}
		slices.Sort(v)
		slices.Sort(nv)
		if !slices.Equal(v, sorted(voters)) || !slices.Equal(nv, sorted(nonvoters)) {
			return fmt.Errorf("voters %v non-voters %v, want %v and %v", v, nv, sorted(voters), sorted(nonvoters))
		}
		return nil
	})
	if err != nil {
		c.t.Fatalf("members: %v", err)
	}
	return last
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func (c *Cluster) ids(idx ...int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, c.nodes[i].ID)
	}
	return out
}

// waitUnhealthy polls until the PRIMARY reports id unhealthy.
func (c *Cluster) waitUnhealthy(cl *client.Client, id string) {
	c.t.Helper()
	err := testutil.Poll(raceSlack(20*time.Second), pollEvery, func() error {
		ms, err := c.Members(cl)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m.Id == id && m.Healthy {
				return fmt.Errorf("%s still healthy", id)
			}
		}
		return nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
}

// removeMember removes id through the PRIMARY.
func (c *Cluster) removeMember(cl *client.Client, id string, force bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return cl.RemoveMember(ctx, id, force)
}

// TestMembersReplaceDeadNode: under a 16-client write load, a STANDBY is
// SIGKILLed and its data dir deleted; a new node at new addresses joins,
// catches up, is promoted by the autopilot, and the dead one is removed.
// The load sees nothing but retried NOT_READY, and its history checks out.
func TestMembersReplaceDeadNode(t *testing.T) {
	c := newCluster(t, 3, WithLogLevel("info"), withShortStabilization())
	c.StartAll()
	p := c.WaitRoles(raceSlack(20 * time.Second))
	cl := c.Client()
	defer cl.Close()
	load := startLoad(t, c.Addrs(), 16)
	load.waitProgress(t, 200, 30*time.Second)

	dead := (p + 1) % 3
	c.Kill(dead)
	if err := os.RemoveAll(c.Node(dead).DataDir); err != nil {
		t.Fatal(err)
	}
	n4 := c.AddNode()
	c.waitMembers(cl, raceSlack(60*time.Second), c.ids(0, 1, 2, n4), nil)
	if err := c.removeMember(cl, c.Node(dead).ID, false); err != nil {
		t.Fatalf("remove %s: %v", c.Node(dead).ID, err)
	}
	var live []int
	for i := range c.N() {
		if i != dead {
			live = append(live, i)
		}
	}
	c.waitMembers(cl, raceSlack(20*time.Second), c.ids(live...), nil)
	if _, _, err := c.waitRolesAmong(raceSlack(20*time.Second), live); err != nil {
		t.Fatalf("roles after the replacement: %v", err)
	}
	load.waitProgress(t, 200, 30*time.Second)
	load.stopAndCheck(t, cl)
	if n := load.res.Errors; n != 0 {
		t.Errorf("%d calls failed (only retried NOT_READY is allowed)", n)
	}

	// The new node's status names the members, itself included, with
	// their client addresses.
	r := runXCE(t, 10*time.Second, "status", "--addr", c.Node(n4).ClientAddr, "--json")
	var st struct {
		Members []struct {
			ID         string `json:"id"`
			ClientAddr string `json:"client_addr"`
			Voter      bool   `json:"voter"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.Stdout)
	}
	var got []string
	for _, m := range st.Members {
		if m.Voter {
			got = append(got, m.ID+"@"+m.ClientAddr)
		}
	}
	var want []string
	for _, i := range live {
		want = append(want, c.Node(i).ID+"@"+c.Node(i).ClientAddr)
	}
	if !slices.Equal(sorted(got), sorted(want)) {
		t.Errorf("status members %v, want %v", got, want)
	}
}

// TestMembersGrowShrink grows a cluster from three voters to five under
// load, removes the PRIMARY (which hands leadership on first), shrinks back
// to three, and refuses a removal that would leave no healthy quorum.
func TestMembersGrowShrink(t *testing.T) {
	c := newCluster(t, 3, WithLogLevel("info"), withShortStabilization())
	c.StartAll()
	c.WaitRoles(raceSlack(20 * time.Second))
	cl := c.Client()
	defer cl.Close()
	load := startLoad(t, c.Addrs(), 16)
	load.waitProgress(t, 200, 30*time.Second)

	n4 := c.AddNode()
	n5 := c.AddNode()
	c.waitMembers(cl, raceSlack(60*time.Second), c.ids(0, 1, 2, n4, n5), nil)
	p := c.WaitRoles(raceSlack(20 * time.Second))

	// Remove the PRIMARY: it hands leadership on, and the removal is made
	// by the next one.
	old := c.Node(p).ID
	if err := c.removeMember(cl, old, false); err != nil {
		t.Fatalf("remove the PRIMARY %s: %v", old, err)
	}
	var rest []int
	for i := range c.N() {
		if i != p {
			rest = append(rest, i)
		}
	}
	c.waitMembers(cl, raceSlack(20*time.Second), c.ids(rest...), nil)
	c.Stop(p)

	// Shrink to three voters.
	np, _, err := c.waitRolesAmong(raceSlack(20*time.Second), rest)
	if err != nil {
		t.Fatal(err)
	}
	var standbys []int
	for _, i := range rest {
		if i != np {
			standbys = append(standbys, i)
		}
	}
	if err := c.removeMember(cl, c.Node(standbys[0]).ID, false); err != nil {
		t.Fatalf("remove %s: %v", c.Node(standbys[0]).ID, err)
	}
	c.Stop(standbys[0])
	three := []int{np, standbys[1], standbys[2]}
	c.waitMembers(cl, raceSlack(20*time.Second), c.ids(three...), nil)

	// One of the three down: removing another would leave one healthy
	// voter of two, no quorum. Refused, and nothing changes.
	c.Kill(standbys[1])
	c.waitUnhealthy(cl, c.Node(standbys[1]).ID)
	err = c.removeMember(cl, c.Node(standbys[2]).ID, false)
	if !errors.Is(err, client.ErrFailedPrecondition) || !strings.Contains(err.Error(), "quorum") {
		t.Fatalf("unsafe removal: %v, want a FailedPrecondition about quorum", err)
	}
	c.waitMembers(cl, raceSlack(10*time.Second), c.ids(three...), nil)
	c.Start(standbys[1])
	if _, _, err := c.waitRolesAmong(raceSlack(20*time.Second), three); err != nil {
		t.Fatalf("roles of the three left: %v", err)
	}
	load.waitProgress(t, 200, 30*time.Second)
	load.stopAndCheck(t, cl)
}

// TestMembersClientFollowsReplacement replaces all three original nodes,
// one by one, while a 16-client load configured with only the three
// original addresses keeps writing: the clients learn the new members from
// Status and drop the removed ones.
func TestMembersClientFollowsReplacement(t *testing.T) {
	c := newCluster(t, 3, WithLogLevel("info"), withShortStabilization())
	c.StartAll()
	c.WaitRoles(raceSlack(20 * time.Second))
	original := c.Addrs()
	cl := c.ClientOf(original...)
	defer cl.Close()
	load := startLoad(t, original, 16)
	load.waitProgress(t, 200, 30*time.Second)

	members := []int{0, 1, 2}
	for old := range 3 {
		n := c.AddNode()
		members = append(members, n)
		c.waitMembers(cl, raceSlack(60*time.Second), c.ids(members...), nil)
		if err := c.removeMember(cl, c.Node(old).ID, false); err != nil {
			t.Fatalf("remove %s: %v", c.Node(old).ID, err)
		}
		members = slices.DeleteFunc(members, func(i int) bool { return i == old })
		c.waitMembers(cl, raceSlack(20*time.Second), c.ids(members...), nil)
		c.Stop(old)
		if _, _, err := c.waitRolesAmong(raceSlack(20*time.Second), members); err != nil {
			t.Fatalf("roles after replacing %s: %v", c.Node(old).ID, err)
		}
		load.waitProgress(t, 100, 30*time.Second)
	}
	load.stopAndCheck(t, cl)
	// The load's clients followed on their own; a Status answer makes
	// this one drop every removed member at once.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cl.Status(ctx, c.Node(members[0]).ClientAddr); err != nil {
		t.Fatal(err)
	}
	if got := cl.Endpoints(); slices.ContainsFunc(got, func(a string) bool { return slices.Contains(original, a) }) {
		t.Errorf("the client still lists an original address: %v", got)
	}
}
