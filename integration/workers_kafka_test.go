package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/client"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/integration/faultnet"
	"github.com/xce/xce/internal/localcluster"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/worker/kvworker"
)

// Real workers on Kafka (docs/design.md, "At most one active" and "The
// worker library"): three servers, one kafka-dev broker, three
// `xce worker --store` processes and tasks input-0 … input-5 (stateful,
// one standby each), fed by an input generator in the test process. Each
// test disturbs one part and then checks, read_committed, that every input
// record is in the output exactly once and that a task's epochs never go
// back.

// kvTasks is the number of input-<p> tasks (and of every topic's partitions).
const kvTasks = 6

// kvInputEvery spaces the generator's records: a modest, steady load.
const kvInputEvery = 10 * time.Millisecond

var kvWorkerIDs = []string{"w1", "w2", "w3"}

// kvRig is the cluster, the broker, the workers and the input generator of
// one test. Its cleanups kill every process it started and, on failure,
// print each one's log tail.
type kvRig struct {
	t       *testing.T
	c       *Cluster
	k       *kafkaDev
	brokers []string
	prod    *kgo.Client
	adm     *kadm.Client

	mu    sync.Mutex
	procs map[string]*localcluster.Process
	logs  map[string]string

	genStop context.CancelFunc
	genDone chan struct{}
	sent    atomic.Int64

	opts kvOpts
}

// kvOpts varies a kvRig; the zero value is the rig described above.
type kvOpts struct {
	// controllersOf, when set, gives a worker's --controllers (default:
	// every node's client address).
	controllersOf func(c *Cluster, id string) []string
	// workers replaces kvWorkerIDs; args adds to a worker's command line.
	workers []string
	args    func(id string) []string
	// standbys per task (0: 1), and config adds to the servers' config.
	standbys int
	config   func(*configs.Config)
}

// newKVRig starts everything; controllersOf, when set, gives a worker's
// --controllers (default: every node's client address).
func newKVRig(t *testing.T, controllersOf func(c *Cluster, id string) []string) *kvRig {
	return newKVRigWith(t, kvOpts{controllersOf: controllersOf})
}

// newKVRigWith starts a rig varied by o.
func newKVRigWith(t *testing.T, o kvOpts) *kvRig {
	t.Helper()
	if o.workers == nil {
		o.workers = kvWorkerIDs
	}
	o.standbys = max(o.standbys, 1)
	k := startKafkaDev(t, false)
	r := &kvRig{t: t, k: k, brokers: []string{k.Addr}, procs: map[string]*localcluster.Process{}, logs: map[string]string{}, opts: o}
	ctx, cancel := context.WithTimeout(context.Background(), raceSlack(10*time.Second))
	err := kvworker.EnsureTopics(ctx, kvworker.Config{Brokers: r.brokers, StoreDir: "-"}, kvTasks)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	r.c = newCluster(t, 3, WithLogLevel("info"), WithConfig(func(cfg *configs.Config) {
		itAssignor(cfg)
		if o.config != nil {
			o.config(cfg)
		}
	}))
	r.c.StartAll()
	r.c.WaitRoles(raceSlack(15 * time.Second))
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, id := range slices.Sorted(maps.Keys(r.procs)) {
			p := r.procs[id]
			_ = p.Signal(syscall.SIGCONT) // a stopped process dies only once it runs
			if !p.Exited() {
				_, _ = p.Kill(10 * time.Second)
			}
			if t.Failed() {
				t.Logf("---- last 30 lines of worker %s (%s) ----\n%s", id, r.logs[id], tailLines(r.logs[id], 30, 500))
			}
		}
	})
	for _, id := range o.workers {
		ctl := r.c.Addrs()
		if o.controllersOf != nil {
			ctl = o.controllersOf(r.c, id)
		}
		r.startWorker(id, ctl)
	}
	cl := r.c.Client()
	defer cl.Close()
	for p := range kvTasks {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cl.Submit(ctx, client.Task{ID: kvTask(p), Stateful: true, StandbyReplicas: uint32(o.standbys)})
		cancel()
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
	}

	prod, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(kvworker.DefaultInputTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	r.prod, r.adm = prod, kadm.NewClient(prod)
	gctx, stop := context.WithCancel(context.Background())
	r.genStop, r.genDone = stop, make(chan struct{})
	go r.generate(gctx)
	t.Cleanup(r.stopInput)
	return r
}

func kvTask(p int) string { return fmt.Sprintf("%s%d", kvworker.TaskPrefix, p) }

func (r *kvRig) startWorker(id string, controllers []string) {
	r.t.Helper()
	log := filepath.Join(r.c.dir, "worker-"+id+".log")
	args := []string{"worker", "--id", id,
		"--controllers", strings.Join(controllers, ","), "--store", filepath.Join(r.c.dir, "store-"+id),
		"--brokers", r.k.Addr, "--log-format", "json"}
	if !slices.Equal(controllers, r.c.Addrs()) {
		// Proxies: the worker must stay on them.
		args = append(args, "--pin-controllers")
	}
	if r.opts.args != nil {
		args = append(args, r.opts.args(id)...)
	}
	p, err := localcluster.StartProcess(xceBin, log, true, args...)
	if err != nil {
		r.t.Fatalf("start worker %s: %v", id, err)
	}
	r.mu.Lock()
	r.procs[id], r.logs[id] = p, log
	r.mu.Unlock()
}

func (r *kvRig) proc(id string) *localcluster.Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.procs[id]
}

// generate produces keyed records round robin over the input partitions
// (keys k0 … k59, each in one partition) until ctx ends.
func (r *kvRig) generate(ctx context.Context) {
	defer close(r.genDone)
	tick := time.NewTicker(kvInputEvery)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		key := i % 60
		rec := &kgo.Record{Partition: int32(key % kvTasks), Key: fmt.Appendf(nil, "k%d", key)}
		if err := r.prod.ProduceSync(ctx, rec).FirstErr(); err == nil {
			r.sent.Add(1)
		}
	}
}

// stopInput stops the generator and waits for it.
func (r *kvRig) stopInput() {
	r.genStop()
	<-r.genDone
}

// settle waits until every task has an active and a caught-up standby,
// balanced over the three workers, and every task has committed input.
func (r *kvRig) settle() placementOf {
	r.t.Helper()
	settledCopies(r.t, r.c, kvTasks, r.opts.workers, r.opts.standbys, raceSlack(40*time.Second))
	testutil.Eventually(r.t, raceSlack(20*time.Second), "every task commits input", func() bool {
		for p := range kvTasks {
			if committedOffset(r.adm, kvTask(p), int32(p)) < 5 {
				return false
			}
		}
		return true
	})
	// The assignor may have moved copies meanwhile (a lag that crossed
	// the recovery lag): the placement returned is the one after that.
	return placements(settledCopies(r.t, r.c, kvTasks, r.opts.workers, r.opts.standbys, raceSlack(40*time.Second)))
}

// assignmentCLI runs `xce assignment --json` and returns each task's
// placement as the CLI prints it.
func (r *kvRig) assignmentCLI() (map[string]cliPlacement, error) {
	res := runXCE(r.t, 15*time.Second, "assignment", "--json", "--addr", strings.Join(r.c.Addrs(), ","), "--timeout", "5s")
	if res.Code != 0 {
		return nil, fmt.Errorf("xce assignment: exit %d: %s", res.Code, res.Stderr)
	}
	var out struct {
		Tasks []cliPlacement `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
		return nil, fmt.Errorf("xce assignment --json: %v", err)
	}
	m := map[string]cliPlacement{}
	for _, t := range out.Tasks {
		m[t.TaskID] = t
	}
	return m, nil
}

type cliPlacement struct {
	TaskID string `json:"task_id"`
	Active string `json:"active"`
	Epoch  uint64 `json:"epoch"`
	Update string `json:"update"`
}

// outRec is one output record: its input record, the epoch it was
// written in and its timestamp (when the active produced it).
type outRec struct {
	task, off int64
	epoch     uint64
	at        time.Time
}

// checkExactlyOnce stops the input, waits for every task to commit its
// input's end, reads the output read_committed to its end and checks:
// every input record's output exactly once, each key's counts 1, 2, 3…,
// and per task the epochs never go back along the input. It returns the
// output records by task, in input order.
func (r *kvRig) checkExactlyOnce() map[int64][]outRec {
	r.t.Helper()
	r.stopInput()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	ends, err := r.adm.ListEndOffsets(ctx, kvworker.DefaultInputTopic)
	cancel()
	if err != nil {
		r.t.Fatal(err)
	}
	total := int64(0)
	for p := range kvTasks {
		o, _ := ends.Lookup(kvworker.DefaultInputTopic, int32(p))
		total += o.Offset
		testutil.Eventually(r.t, raceSlack(30*time.Second), fmt.Sprintf("%s commits its end %d", kvTask(p), o.Offset), func() bool {
			return committedOffset(r.adm, kvTask(p), int32(p)) == o.Offset
		})
	}
	recs := r.readOutput()
	byTask := map[int64][]outRec{}
	seen := map[[2]int64]int{}
	for _, o := range recs {
		seen[[2]int64{o.task, o.off}]++
		byTask[o.task] = append(byTask[o.task], o)
	}
	bad := 0
	for p := range kvTasks {
		o, _ := ends.Lookup(kvworker.DefaultInputTopic, int32(p))
		for off := range o.Offset {
			if n := seen[[2]int64{int64(p), off}]; n != 1 && bad < 20 {
				bad++
				r.t.Errorf("input %d:%d is in the output %d times", p, off, n)
			}
		}
	}
	if len(recs) != int(total) {
		r.t.Errorf("%d output records for %d input records", len(recs), total)
	}
	for task, rs := range byTask {
		slices.SortFunc(rs, func(a, b outRec) int { return int(a.off - b.off) })
		for i := 1; i < len(rs); i++ {
			if rs[i].epoch < rs[i-1].epoch {
				r.t.Errorf("%s: input %d has output of epoch %d after input %d of epoch %d",
					kvTask(int(task)), rs[i].off, rs[i].epoch, rs[i-1].off, rs[i-1].epoch)
				break
			}
		}
	}
	r.t.Logf("exactly once: %d input records (%d produced by the generator), %d output records", total, r.sent.Load(), len(recs))
	return byTask
}

// readOutput reads the output topic read_committed to its end; each key's
// values must run 1, 2, 3….
func (r *kvRig) readOutput() []outRec {
	r.t.Helper()
	t := r.t
	ctx, cancel := context.WithTimeout(context.Background(), raceSlack(20*time.Second))
	defer cancel()
	ends, err := r.adm.ListCommittedOffsets(ctx, kvworker.DefaultOutputTopic)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]uint64{}
	var out []outRec
	consumeToEnd(t, ctx, r.brokers, kvworker.DefaultOutputTopic, ends, func(rec *kgo.Record) {
		if rec.Attrs.IsControl() {
			return
		}
		if v, err := strconv.ParseUint(string(rec.Value), 10, 64); err != nil || v != last[string(rec.Key)]+1 {
			t.Errorf("output %q=%q at %d[%d] follows %d", rec.Key, rec.Value, rec.Partition, rec.Offset, last[string(rec.Key)])
		} else {
			last[string(rec.Key)] = v
		}
		o := outRec{task: -1, at: rec.Timestamp}
		for _, h := range rec.Headers {
			switch h.Key {
			case kvworker.HeaderInput:
				p, off, ok := strings.Cut(string(h.Value), ":")
				pi, err1 := strconv.ParseInt(p, 10, 64)
				oi, err2 := strconv.ParseInt(off, 10, 64)
				if ok && err1 == nil && err2 == nil {
					o.task, o.off = pi, oi
				}
			case kvworker.HeaderEpoch:
				o.epoch, _ = strconv.ParseUint(string(h.Value), 10, 64)
			}
		}
		if o.task < 0 || o.epoch == 0 {
			t.Errorf("output at %d[%d] has headers %v", rec.Partition, rec.Offset, rec.Headers)
			return
		}
		out = append(out, o)
	})
	return out
}

// consumeToEnd reads topic from its start until every partition reaches
// its offset in ends (read_committed, with the transaction markers), and
// gives fn each record.
func consumeToEnd(t *testing.T, ctx context.Context, brokers []string, topic string, ends kadm.ListedOffsets, fn func(*kgo.Record)) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pos := map[int32]int64{}
	for {
		done := true
		ends.Each(func(o kadm.ListedOffset) { done = done && pos[o.Partition] >= o.Offset })
		if done {
			return
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s not read to its end: at %v", topic, pos)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			pos[rec.Partition] = rec.Offset + 1
			fn(rec)
		})
	}
}

// logLine is one JSON line of a worker's log.
type logLine struct {
	Time    time.Time `json:"time"`
	Message string    `json:"message"`
	Task    string    `json:"task"`
	Role    string    `json:"role"`
	Epoch   uint64    `json:"epoch"`
	Why     string    `json:"why"`
	Records int64     `json:"records"`
	Rate    float64   `json:"records_per_second"`
}

// logLines reads worker id's log (its JSON lines; other lines are skipped).
func (r *kvRig) logLines(id string) []logLine {
	r.t.Helper()
	r.mu.Lock()
	path := r.logs[id]
	r.mu.Unlock()
	f, err := os.Open(path)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && !l.Time.IsZero() {
			out = append(out, l)
		}
	}
	return out
}

// first returns the first line matching f, and whether there is one.
func first(ls []logLine, f func(logLine) bool) (logLine, bool) {
	for _, l := range ls {
		if f(l) {
			return l, true
		}
	}
	return logLine{}, false
}

// logRestoreRates logs the restore rates the workers logged (records/s),
// those of restores of 50 records or more: smaller ones time mostly the
// fetch's round trip.
func (r *kvRig) logRestoreRates() {
	r.t.Helper()
	var rates []string
	for _, id := range kvWorkerIDs {
		for _, l := range r.logLines(id) {
			if strings.HasPrefix(l.Message, "restored ") && l.Records >= 50 {
				rates = append(rates, fmt.Sprintf("%s %s %d records at %.0f/s", id, l.Task, l.Records, l.Rate))
			}
		}
	}
	if len(rates) == 0 {
		r.t.Logf("restore rate: no restore of 50 records or more in this run")
		return
	}
	r.t.Logf("restore rates: %s", strings.Join(rates, "; "))
}

// activesOf lists the tasks whose active is worker id.
func activesOf(a placementOf, id string) []string {
	var out []string
	for t, p := range a {
		if p.Active == id {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

func taskPartition(t *testing.T, task string) int32 {
	p, err := kvworker.Partition(task)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestWorkerKillResumesOnStandby: SIGKILL a worker while it processes; its
// tasks run again on their caught-up standbys within the session timeout
// and a little more, and every input record is in the output exactly once.
func TestWorkerKillResumesOnStandby(t *testing.T) {
	r := newKVRig(t, nil)
	before := r.settle()
	victim := "w2"
	tasks := activesOf(before, victim)
	if len(tasks) == 0 {
		t.Fatalf("%s runs no active: %v", victim, before)
	}
	offsets := map[string]int64{}
	for _, task := range tasks {
		offsets[task] = committedOffset(r.adm, task, taskPartition(t, task))
	}
	killed := time.Now()
	if _, err := r.proc(victim).Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	err := testutil.Poll(itSessionTimeout+raceSlack(15*time.Second), 50*time.Millisecond, func() error {
		a, err := r.c.assignment()
		if err != nil {
			return err
		}
		pl := placements(a)
		for _, task := range tasks {
			p := pl[task]
			if p == nil || p.Active == "" || p.Active == victim {
				return fmt.Errorf("%s: active %v", task, p)
			}
			if got := committedOffset(r.adm, task, taskPartition(t, task)); got <= offsets[task] {
				return fmt.Errorf("%s on %s: committed offset %d, %d at the kill", task, p.Active, got, offsets[task])
			}
		}
		return nil
	})
	took := time.Since(killed)
	if err != nil {
		t.Fatalf("%s's tasks %v do not run elsewhere: %v", victim, tasks, err)
	}
	t.Logf("failover: worker SIGKILL -> its tasks %v commit input elsewhere after %v (session timeout %v)",
		tasks, took.Round(time.Millisecond), itSessionTimeout)
	if limit := itSessionTimeout + raceSlack(4*time.Second); took > limit {
		t.Errorf("failover took %v, more than the session timeout and slack (%v)", took, limit)
	}
	after, err := r.c.assignment()
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if got, want := placements(after)[task].Active, before[task].Standbys[0]; got != want {
			t.Errorf("%s went to %s, want its caught-up standby %s", task, got, want)
		}
	}
	// A standby to replace the lost ones restores while input still comes.
	settledPlacement(t, r.c, kvTasks, []string{"w1", "w3"}, raceSlack(30*time.Second))
	r.checkExactlyOnce()
	r.logRestoreRates()
}

// TestWorkerPausedDuringMoveIsFenced: SIGSTOP the worker of an active
// until its task is active and running elsewhere, then SIGCONT it: none of
// its late writes reaches the output (read_committed), and it gives the
// task up.
func TestWorkerPausedDuringMoveIsFenced(t *testing.T) {
	r := newKVRig(t, nil)
	before := r.settle()
	victim := "w1"
	tasks := activesOf(before, victim)
	if len(tasks) == 0 {
		t.Fatalf("%s runs no active: %v", victim, before)
	}
	task := tasks[0]
	oldEpoch := before[task].Epoch
	// The victim runs the task in that epoch (its grant may lag the
	// assignment by a heartbeat).
	testutil.Eventually(t, raceSlack(20*time.Second), victim+" processes "+task, func() bool {
		_, ok := first(r.logLines(victim), func(l logLine) bool {
			return l.Message == "processing the input" && l.Task == task && l.Epoch == oldEpoch
		})
		return ok
	})
	p := r.proc(victim)
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	var moved cliPlacement
	err := testutil.Poll(itSessionTimeout+raceSlack(20*time.Second), 100*time.Millisecond, func() error {
		a, err := r.assignmentCLI()
		if err != nil {
			return err
		}
		moved = a[task]
		if moved.Active == "" || moved.Active == victim {
			return fmt.Errorf("%s: %+v", task, moved)
		}
		// Its new worker runs it: the active copy of the new epoch
		// processes the input. (The UPDATE "running" needs a lag of 0,
		// which an active under steady input seldom reports.)
		if _, ok := first(r.logLines(moved.Active), func(l logLine) bool {
			return l.Message == "processing the input" && l.Task == task && l.Epoch == moved.Epoch
		}); !ok {
			return fmt.Errorf("%s: %+v, not processing yet", task, moved)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s not running elsewhere while %s is stopped: %v", task, victim, err)
	}
	t.Logf("%s stopped: %s active on %s in epoch %d (was %d) after %v",
		victim, task, moved.Active, moved.Epoch, oldEpoch, time.Since(stopped).Round(time.Millisecond))
	if moved.Epoch <= oldEpoch {
		t.Fatalf("%s moved to %s with epoch %d, not above %d", task, moved.Active, moved.Epoch, oldEpoch)
	}
	// The new active commits input before the old one wakes.
	from := committedOffset(r.adm, task, taskPartition(t, task))
	testutil.Eventually(t, raceSlack(15*time.Second), task+" progresses on its new worker", func() bool {
		return committedOffset(r.adm, task, taskPartition(t, task)) > from+10
	})
	resumed := time.Now()
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The woken worker gives the task up: its active copy stops.
	testutil.Eventually(t, raceSlack(20*time.Second), victim+" stops its active "+task, func() bool {
		ls := r.logLines(victim)
		_, ok := first(ls, func(l logLine) bool {
			return l.Message == "copy stopped" && l.Task == task && l.Role == "active" && l.Epoch == oldEpoch
		})
		return ok
	})
	// It keeps running and stays a part of the cluster.
	testutil.Eventually(t, raceSlack(20*time.Second), victim+" heartbeats again", func() bool {
		a, err := r.c.assignment()
		if err != nil {
			return false
		}
		for _, ta := range a.Tasks {
			if _, ok := ta.Lags[victim]; ok {
				return true
			}
		}
		return false
	})
	if a, err := r.assignmentCLI(); err == nil && a[task].Active == victim && a[task].Epoch == oldEpoch {
		t.Errorf("%s is back on %s in its old epoch %d", task, victim, oldEpoch)
	}
	byTask := r.checkExactlyOnce()
	// After the first output of the new epoch, only the new epoch (or a
	// later one) for the task: nothing of the paused worker.
	newSeen := false
	for _, o := range byTask[int64(taskPartition(t, task))] {
		if o.epoch >= moved.Epoch {
			newSeen = true
		} else if newSeen {
			t.Errorf("%s: output of epoch %d for input %d after the move to epoch %d", task, o.epoch, o.off, moved.Epoch)
		}
	}
	if !newSeen {
		t.Errorf("%s: no output in the new epoch %d", task, moved.Epoch)
	}
	t.Logf("%s resumed at %s", victim, resumed.Format(time.RFC3339Nano))
}

// TestWorkerPartitionedFromControllers: one worker reaches the controllers
// only through a proxy, which is cut. It stops its actives before any
// other worker starts them (its log's stop line precedes the new active's
// start line; no two epochs interleave in the output), and exactly once
// holds.
func TestWorkerPartitionedFromControllers(t *testing.T) {
	const cut = "w3"
	fn := faultnet.New()
	t.Cleanup(func() { _ = fn.Close() })
	// The proxies know the worker by its source address (loopback) and
	// each controller by a name of its own.
	fn.Node(cut, "127.0.0.1")
	r := newKVRig(t, func(c *Cluster, id string) []string {
		if id != cut {
			return c.Addrs()
		}
		var out []string
		for i := range c.N() {
			n := c.Node(i)
			fn.Node(n.ID, "controller:"+n.ID)
			a, err := fn.Proxy("127.0.0.1:0", n.ID, n.ClientAddr)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, a)
		}
		return out
	})
	before := r.settle()
	tasks := activesOf(before, cut)
	if len(tasks) == 0 {
		t.Fatalf("%s runs no active: %v", cut, before)
	}
	// The worker runs those actives (its grants may lag the assignment
	// by a heartbeat).
	for _, task := range tasks {
		testutil.Eventually(t, raceSlack(20*time.Second), cut+" processes "+task, func() bool {
			_, ok := first(r.logLines(cut), func(l logLine) bool {
				return l.Message == "processing the input" && l.Task == task && l.Epoch == before[task].Epoch
			})
			return ok
		})
	}
	cutAt := time.Now()
	fn.Isolate(cut)
	err := testutil.Poll(itSessionTimeout+raceSlack(20*time.Second), 100*time.Millisecond, func() error {
		a, err := r.c.assignment()
		if err != nil {
			return err
		}
		pl := placements(a)
		for _, task := range tasks {
			if p := pl[task]; p == nil || p.Active == "" || p.Active == cut {
				return fmt.Errorf("%s: %v", task, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s's tasks did not move while it is cut off: %v", cut, err)
	}
	t.Logf("cut %s: its tasks %v have other actives after %v", cut, tasks, time.Since(cutAt).Round(time.Millisecond))
	after, err := r.c.assignment()
	if err != nil {
		t.Fatal(err)
	}
	pl := placements(after)
	for _, task := range tasks {
		from := committedOffset(r.adm, task, taskPartition(t, task))
		testutil.Eventually(t, raceSlack(15*time.Second), task+" progresses on its new worker", func() bool {
			return committedOffset(r.adm, task, taskPartition(t, task)) > from
		})
	}
	// The lease ran out and the actives stopped before anyone else
	// started them.
	cutLog := r.logLines(cut)
	lapse, ok := first(cutLog, func(l logLine) bool { return strings.HasPrefix(l.Message, "the active lease ran out") })
	if !ok {
		t.Errorf("%s never logged that its active lease ran out", cut)
	}
	for _, task := range tasks {
		p := pl[task]
		stop, ok := first(cutLog, func(l logLine) bool {
			return l.Message == "copy stopped" && l.Task == task && l.Role == "active" && l.Time.After(cutAt.Add(-time.Second))
		})
		if !ok {
			t.Errorf("%s: %s never logged that its active stopped", task, cut)
			continue
		}
		start, ok := first(r.logLines(p.Active), func(l logLine) bool {
			return l.Message == "starting a copy" && l.Task == task && l.Role == "active" && l.Epoch == p.Epoch
		})
		if !ok {
			t.Errorf("%s: its new active %s never logged its start in epoch %d", task, p.Active, p.Epoch)
			continue
		}
		t.Logf("%s: lease ran out on %s at +%v, its active stopped at +%v, %s started it (epoch %d) at +%v", task, cut,
			lapse.Time.Sub(cutAt).Round(time.Millisecond), stop.Time.Sub(cutAt).Round(time.Millisecond), p.Active, p.Epoch,
			start.Time.Sub(cutAt).Round(time.Millisecond))
		if !stop.Time.Before(start.Time) {
			t.Errorf("%s: %s started its active at %s, before %s stopped its own at %s", task, p.Active,
				start.Time.Format(time.RFC3339Nano), cut, stop.Time.Format(time.RFC3339Nano))
		}
	}
	fn.Heal()
	r.checkExactlyOnce()
}

// TestControllerKillDuringWorkerLoad: SIGKILL the primary while the
// workers process; once the new primary settles no task has moved (same
// active, same epoch), and exactly once holds.
func TestControllerKillDuringWorkerLoad(t *testing.T) {
	r := newKVRig(t, nil)
	before := r.settle()
	primary := r.c.WaitRoles(raceSlack(5 * time.Second))
	r.c.Kill(primary)
	r.c.WaitRoles(raceSlack(15 * time.Second))
	if err := testutil.Poll(itSessionTimeout+raceSlack(15*time.Second), 100*time.Millisecond, func() error {
		a, err := r.c.assignment()
		if err != nil {
			return err
		}
		if a.Settling {
			return fmt.Errorf("still settling")
		}
		for _, ta := range a.Tasks {
			if _, ok := ta.Lags[ta.Placement.Active]; !ok {
				return fmt.Errorf("no lag report from %s for %s", ta.Placement.Active, ta.Placement.TaskId)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("the new primary did not settle: %v", err)
	}
	a, err := r.assignmentCLI()
	if err != nil {
		t.Fatal(err)
	}
	for task, p := range before {
		if got := a[task]; got.Active != p.Active || got.Epoch != p.Epoch {
			t.Errorf("%s moved over the failover: %s@%d -> %s@%d", task, p.Active, p.Epoch, got.Active, got.Epoch)
		}
	}
	for p := range kvTasks {
		from := committedOffset(r.adm, kvTask(p), int32(p))
		testutil.Eventually(t, raceSlack(15*time.Second), kvTask(p)+" progresses after the failover", func() bool {
			return committedOffset(r.adm, kvTask(p), int32(p)) > from
		})
	}
	r.checkExactlyOnce()
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
