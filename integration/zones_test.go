package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/worker/kvworker"
)

// Placement for real fleets (docs/design.md, "The assignor"): workers with
// zone labels and copies spread by zone, and a replacement delay that
// keeps a restarted worker's copies, with real Kafka-backed workers.

var zoneOf = map[string]string{"a1": "a", "a2": "a", "b1": "b", "b2": "b", "c1": "c", "c2": "c"}

// zonesSpanned returns, per task, the zones its active and standbys run in.
func zonesSpanned(a placementOf) map[string]int {
	out := map[string]int{}
	for id, p := range a {
		z := map[string]bool{zoneOf[p.Active]: true}
		for _, s := range p.Standbys {
			z[zoneOf[s]] = true
		}
		out[id] = len(z)
	}
	return out
}

func (r *kvRig) checkZones(a placementOf, want int) {
	r.t.Helper()
	for id, n := range zonesSpanned(a) {
		if n != want {
			r.t.Fatalf("%s spans %d zones, want %d: %v", id, n, want, a)
		}
	}
}

// TestZoneOutageKeepsEveryTask: three zones of two workers, six tasks with
// two standbys each, copies spread by zone. Both workers of zone a are
// killed: every task keeps running on zones b and c, spread over both;
// once zone a is back, every task has a copy in each zone again. Every
// input is in the output exactly once.
func TestZoneOutageKeepsEveryTask(t *testing.T) {
	ids := slices.Sorted(maps.Keys(zoneOf))
	r := newKVRigWith(t, kvOpts{workers: ids, standbys: 2,
		args:   func(id string) []string { return []string{"--label", "zone=" + zoneOf[id], "--label", "rack=r-" + id} },
		config: func(cfg *configs.Config) { cfg.Assignor.SpreadBy = []string{"zone"} }})
	r.checkZones(r.settle(), 3)

	start := time.Now()
	for _, id := range []string{"a1", "a2"} {
		if _, err := r.proc(id).Kill(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	survivors := []string{"b1", "b2", "c1", "c2"}
	during := placements(settledCopies(t, r.c, kvTasks, survivors, 2, raceSlack(40*time.Second)))
	r.checkZones(during, 2)
	r.waitForInput("with zone a down")
	t.Logf("zone a down: every task runs on b and c, spread over both, %v after the kill", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	for _, id := range []string{"a1", "a2"} {
		r.startWorker(id, r.c.Addrs())
	}
	r.checkZones(r.settle(), 3)
	t.Logf("zone a back: every task has a copy in each zone again %v after the restart", time.Since(start).Round(time.Millisecond))
	r.checkExactlyOnce()
}

// waitForInput waits until every task has committed input since now.
func (r *kvRig) waitForInput(what string) {
	r.t.Helper()
	from := make([]int64, kvTasks)
	for p := range kvTasks {
		from[p] = committedOffset(r.adm, kvTask(p), int32(p))
	}
	testutil.Eventually(r.t, raceSlack(20*time.Second), "every task commits input "+what, func() bool {
		for p := range kvTasks {
			if committedOffset(r.adm, kvTask(p), int32(p)) <= from[p] {
				return false
			}
		}
		return true
	})
}

// changelogEnds returns the changelog's end offset per partition.
func (r *kvRig) changelogEnds() map[int32]int64 {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := r.adm.ListEndOffsets(ctx, kvworker.DefaultChangelogTopic)
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// copiesOn lists the tasks of which worker id holds a copy.
func copiesOn(a placementOf, id string) []string {
	var out []string
	for task, p := range a {
		if p.Active == id || slices.Contains(p.Standbys, id) {
			out = append(out, task)
		}
	}
	slices.Sort(out)
	return out
}

// TestReplaceDelayKeepsARestartedWorkersCopies: with replace_delay, a
// killed worker's actives move to their standbys at once, but no copy is
// rebuilt elsewhere; restarted within the delay, it gets the same tasks
// back and restores only what it missed, not the changelog from the start.
func TestReplaceDelayKeepsARestartedWorkersCopies(t *testing.T) {
	r := newKVRigWith(t, kvOpts{config: func(cfg *configs.Config) {
		cfg.Assignor.ReplaceDelay = configs.Duration{Duration: raceSlack(30 * time.Second)}
	}})
	before := r.settle()
	held := copiesOn(before, "w1")
	// Enough in the changelog that a restore from the start would show.
	testutil.Eventually(t, raceSlack(30*time.Second), "200 changelog records per task", func() bool {
		for _, o := range r.changelogEnds() {
			if o < 200 {
				return false
			}
		}
		return len(r.changelogEnds()) == kvTasks
	})
	atKill := r.changelogEnds()
	if _, err := r.proc("w1").Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Its actives go to their standbys once its session has expired; no
	// task gets a copy on a worker that held none, and w1 keeps its
	// standbys, up to the restart.
	keeps := func(a placementOf) error {
		for id, p := range a {
			was := before[id]
			for _, w := range append([]string{p.Active}, p.Standbys...) {
				if w != was.Active && !slices.Contains(was.Standbys, w) {
					return fmt.Errorf("%s: a new copy on %s (%v, was %v)", id, w, p, was)
				}
			}
		}
		if got := copiesOn(a, "w1"); !slices.Equal(got, held) {
			return fmt.Errorf("w1 holds %v, held %v", got, held)
		}
		return nil
	}
	testutil.Eventually(t, raceSlack(20*time.Second), "w1's actives move to their standbys", func() bool {
		a, err := r.c.assignment()
		return err == nil && len(activesOf(placements(a), "w1")) == 0 && keeps(placements(a)) == nil
	})
	r.waitForInput("with w1 gone")
	res := runXCE(t, 20*time.Second, "workers", "--json", "--addr", strings.Join(r.c.Addrs(), ","), "--timeout", "5s")
	var ws struct {
		Away []struct {
			WorkerID string   `json:"worker_id"`
			Standbys []string `json:"standbys"`
		} `json:"away"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &ws); err != nil || len(ws.Away) != 1 || ws.Away[0].WorkerID != "w1" || len(ws.Away[0].Standbys) != len(held) {
		t.Fatalf("xce workers --json while w1 is away: %v (%v): %s", ws.Away, err, res.Stdout)
	}
	a, err := r.c.assignment()
	if err != nil {
		t.Fatal(err)
	}
	if err := keeps(placements(a)); err != nil {
		t.Fatalf("%v after w1 was killed: %v", time.Since(killed).Round(time.Millisecond), err)
	}
	restarted := time.Now()
	r.startWorker("w1", r.c.Addrs())
	after := r.settle()
	if got := copiesOn(after, "w1"); !slices.Equal(got, held) {
		t.Fatalf("w1 holds %v after its restart, held %v before", got, held)
	}
	atRestart := r.changelogEnds()
	for _, l := range r.logLines("w1") {
		if l.Time.Before(restarted) || !strings.HasPrefix(l.Message, "restored ") {
			continue
		}
		p := taskPartition(t, l.Task)
		if missed := atRestart[p] - atKill[p]; l.Records > missed+100 {
			t.Errorf("w1 restored %d records of %s after its restart; %d were written while it was away", l.Records, l.Task, missed)
		}
	}
	t.Logf("w1 back %v after the kill; holds %v as before", restarted.Sub(killed).Round(time.Millisecond), held)
	r.checkExactlyOnce()
}

// TestPlacementFreezeThroughTheCLI: `xce placement freeze` holds the
// placement still: a worker that joins gets nothing, while a killed
// worker's actives still go to their standbys; `xce status` and `xce
// assignment` say it is frozen. Unfrozen, the new worker gets its share.
func TestPlacementFreezeThroughTheCLI(t *testing.T) {
	const tasks = 6
	c, ws := placementCluster(t, tasks)
	settledPlacement(t, c, tasks, []string{"w1", "w2", "w3"}, raceSlack(30*time.Second))
	addrs := strings.Join(c.Addrs(), ",")
	cli := func(args ...string) string {
		t.Helper()
		res := runXCE(t, 20*time.Second, append(args, "--addr", addrs, "--timeout", "10s")...)
		if res.Code != 0 {
			t.Fatalf("xce %s: exit %d: %s", strings.Join(args, " "), res.Code, res.Stderr)
		}
		return res.Stdout
	}
	cli("placement", "freeze")
	var st struct {
		Frozen bool `json:"placement_frozen"`
	}
	var asg struct {
		Frozen bool `json:"frozen"`
	}
	if err := json.Unmarshal([]byte(cli("status", "--json")), &st); err != nil || !st.Frozen {
		t.Fatalf("xce status --json: frozen %v (%v)", st.Frozen, err)
	}
	if err := json.Unmarshal([]byte(cli("assignment", "--json")), &asg); err != nil || !asg.Frozen {
		t.Fatalf("xce assignment --json: frozen %v (%v)", asg.Frozen, err)
	}

	ws.start("w4")
	ws.kill("w1")
	// w1's actives go to their standbys; w4 gets nothing but the standbys
	// w1's loss leaves missing (failures are handled): no active, and no
	// warm-up (unfrozen, a joining worker starts warm-ups at once).
	testutil.Eventually(t, itSessionTimeout+raceSlack(10*time.Second), "w1's actives move while frozen", func() bool {
		a, err := c.assignment()
		return err == nil && len(activesOf(placements(a), "w1")) == 0 && len(activesOf(placements(a), "")) == 0
	})
	a, err := c.assignment()
	if err != nil {
		t.Fatal(err)
	}
	if got := activesOf(placements(a), "w4"); len(got) != 0 {
		t.Fatalf("frozen, w4 was given actives %v", got)
	}
	for id, p := range placements(a) {
		if len(p.Warmups) != 0 {
			t.Fatalf("frozen, %s has warm-ups %v: no warm-up starts while frozen", id, p.Warmups)
		}
	}
	cli("placement", "unfreeze")
	settledPlacement(t, c, tasks, []string{"w2", "w3", "w4"}, raceSlack(30*time.Second))
}
