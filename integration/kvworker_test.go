package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/client"
	"github.com/xce/xce/internal/localcluster"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/worker/kvworker"
)

// TestKVWorkerExactlyOnceAcrossWorkerDeath: three `xce worker --store`
// processes run input-0 … input-2 against a kafka-dev broker while input
// keeps arriving. The active of input-0 is SIGKILLed, mid-transaction as
// likely as not; its standby takes over from its own store and the
// changelog. Read read_committed, the output holds every input record
// exactly once, and each key's counts run 1, 2, 3… through the handover.
func TestKVWorkerExactlyOnceAcrossWorkerDeath(t *testing.T) {
	const tasks = 3
	k := startKafkaDev(t, false)
	brokers := []string{k.Addr}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := kvworker.EnsureTopics(ctx, kvworker.Config{Brokers: brokers, StoreDir: "-"}, tasks)
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	c := newCluster(t, 3, WithLogLevel("info"), WithConfig(itAssignor))
	c.StartAll()
	c.WaitRoles(raceSlack(15 * time.Second))
	procs := map[string]*localcluster.Process{}
	logs := map[string]string{}
	t.Cleanup(func() {
		for id, p := range procs {
			if !p.Exited() {
				_, _ = p.Kill(10 * time.Second)
			}
			if t.Failed() {
				t.Logf("---- last 20 lines of worker %s ----\n%s", id, tailLines(logs[id], 20, 400))
			}
		}
	})
	for _, id := range []string{"w1", "w2", "w3"} {
		logs[id] = filepath.Join(c.dir, "worker-"+id+".log")
		p, err := localcluster.StartProcess(xceBin, logs[id], true, "worker", "--id", id,
			"--controllers", strings.Join(c.Addrs(), ","), "--store", filepath.Join(c.dir, "store-"+id),
			"--brokers", k.Addr, "--log-format", "json")
		if err != nil {
			t.Fatal(err)
		}
		procs[id] = p
	}
	cl := c.Client()
	for p := range tasks {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cl.Submit(ctx, client.Task{ID: fmt.Sprintf("input-%d", p), Stateful: true, StandbyReplicas: 1})
		cancel()
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
	}

	// The input: keys k0 … k29, each in one partition, until stopped.
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(kvworker.DefaultInputTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	pctx, stopInput := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var produced int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; pctx.Err() == nil; i++ {
			key := i % 30
			r := &kgo.Record{Partition: int32(key % tasks), Key: fmt.Appendf(nil, "k%d", key)}
			if err := prod.ProduceSync(pctx, r).FirstErr(); err == nil {
				produced++
			}
			time.Sleep(2 * time.Millisecond) // a steady trickle, not a flood
		}
	}()
	defer func() { stopInput(); wg.Wait() }()

	// Every task active with a standby, then the active of input-0 dies.
	settled := settledPlacement(t, c, tasks, []string{"w1", "w2", "w3"}, raceSlack(30*time.Second))
	victim := placements(settled)["input-0"].Active
	adm := kadm.NewClient(prod)
	testutil.Eventually(t, raceSlack(20*time.Second), "input-0 commits input", func() bool {
		return committedOffset(adm, "input-0", 0) > 100
	})
	if _, err := procs[victim].Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s, the active of input-0", victim)
	testutil.Eventually(t, itSessionTimeout+raceSlack(15*time.Second), "input-0 has a new active", func() bool {
		a, err := c.assignment()
		if err != nil {
			return false
		}
		p := placements(a)["input-0"]
		return p != nil && p.Active != "" && p.Active != victim
	})
	before := committedOffset(adm, "input-0", 0)
	testutil.Eventually(t, raceSlack(20*time.Second), "input-0 progresses after the handover", func() bool {
		return committedOffset(adm, "input-0", 0) > before+50
	})
	stopInput()
	wg.Wait()

	// Everything produced gets processed.
	ends, err := adm.ListEndOffsets(context.Background(), kvworker.DefaultInputTopic)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	for p := range tasks {
		o, _ := ends.Lookup(kvworker.DefaultInputTopic, int32(p))
		total += o.Offset
		testutil.Eventually(t, raceSlack(30*time.Second), fmt.Sprintf("input-%d commits its end %d", p, o.Offset), func() bool {
			return committedOffset(adm, fmt.Sprintf("input-%d", p), int32(p)) == o.Offset
		})
	}
	t.Logf("%d input records, %d produced", total, produced)

	seen := readKVOutput(t, prod, brokers)
	for p := range tasks {
		o, _ := ends.Lookup(kvworker.DefaultInputTopic, int32(p))
		for off := range o.Offset {
			if n := seen[fmt.Sprintf("%d:%d", p, off)]; n != 1 {
				t.Errorf("input %d:%d is in the output %d times", p, off, n)
			}
		}
	}
}

// committedOffset is a task's committed input offset (-1: none).
func committedOffset(adm *kadm.Client, task string, p int32) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	offs, err := adm.FetchOffsets(kadm.RequireStable(ctx), kvworker.Group(task))
	if err != nil {
		return -1
	}
	if o, ok := offs.Lookup(kvworker.DefaultInputTopic, p); ok && o.Err == nil {
		return o.At
	}
	return -1
}

// readKVOutput reads the output topic read_committed to its end, counts
// each xce-input header, and checks that each key's values run 1, 2, 3….
func readKVOutput(t *testing.T, admCl *kgo.Client, brokers []string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), raceSlack(20*time.Second))
	defer cancel()
	ends, err := kadm.NewClient(admCl).ListCommittedOffsets(ctx, kvworker.DefaultOutputTopic)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.ConsumeTopics(kvworker.DefaultOutputTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pos := map[int32]int64{}
	seen := map[string]int{}
	last := map[string]uint64{}
	for {
		done := true
		ends.Each(func(o kadm.ListedOffset) { done = done && pos[o.Partition] >= o.Offset })
		if done {
			return seen
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("output not read to its end: at %v", pos)
		}
		fs.EachRecord(func(r *kgo.Record) {
			pos[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() {
				return
			}
			if v, err := strconv.ParseUint(string(r.Value), 10, 64); err != nil || v != last[string(r.Key)]+1 {
				t.Errorf("output %q=%q at %d[%d] follows %d", r.Key, r.Value, r.Partition, r.Offset, last[string(r.Key)])
			} else {
				last[string(r.Key)] = v
			}
			for _, h := range r.Headers {
				if h.Key == kvworker.HeaderInput {
					seen[string(h.Value)]++
				}
			}
		})
	}
}
