package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/bench"
	"github.com/xce/xce/fence"
	"github.com/xce/xce/internal/localcluster"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/state"
)

// The epoch fence end to end (docs/design.md, "Downstream writes and the epoch
// fence"): a kafka-dev broker as a child
// process, three servers publishing through it, and a read_committed
// consumer that checks what downstream sees.

// eventsTopic is the topic the servers publish to (the config default).
const eventsTopic = "xce.events"

// ---------------------------------------------------------------------------
// The broker

// kafkaDev is an `xce kafka-dev` child process. Its output goes to a log
// file in the test's temp dir, whose tail is printed if the test fails.
type kafkaDev struct {
	t       *testing.T
	Addr    string
	DataDir string // "" keeps the log in memory
	LogPath string
	Args    []string // more flags of kafka-dev

	mu   sync.Mutex
	proc *localcluster.Process
	runs int
}

// startKafkaDev starts a broker on a free loopback port, with a data dir
// when persistent and more flags args, and waits until it accepts
// connections. The cleanup kills it.
func startKafkaDev(t *testing.T, persistent bool, args ...string) *kafkaDev {
	t.Helper()
	dir := t.TempDir()
	k := &kafkaDev{
		t:       t,
		Addr:    fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0]),
		LogPath: filepath.Join(dir, "kafka-dev.log"),
		Args:    args,
	}
	if persistent {
		k.DataDir = filepath.Join(dir, "kafka-data")
	}
	t.Cleanup(func() {
		k.kill()
		if t.Failed() {
			t.Logf("---- last 30 lines of kafka-dev (%s) ----\n%s", k.LogPath, tailLines(k.LogPath, 30, 600))
		}
	})
	k.Start()
	return k
}

// Start starts the broker (again, on the same address and data dir) and
// waits until it accepts TCP connections.
func (k *kafkaDev) Start() {
	k.t.Helper()
	k.mu.Lock()
	if k.proc != nil && !k.proc.Exited() {
		k.mu.Unlock()
		k.t.Fatalf("kafka-dev: already running")
	}
	k.runs++
	if f, err := os.OpenFile(k.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		fmt.Fprintf(f, "=== harness: start kafka-dev (run %d) at %s\n", k.runs, time.Now().Format(time.RFC3339Nano))
		f.Close()
	}
	args := []string{"kafka-dev", "--addr", k.Addr}
	if k.DataDir != "" {
		args = append(args, "--data-dir", k.DataDir)
	}
	args = append(args, k.Args...)
	proc, err := localcluster.StartProcess(xceBin, k.LogPath, true, args...)
	if err != nil {
		k.mu.Unlock()
		k.t.Fatalf("start kafka-dev: %v", err)
	}
	k.proc = proc
	k.mu.Unlock()

	start := time.Now()
	if err := testutil.Poll(raceSlack(10*time.Second), pollEvery, func() error {
		if proc.Exited() {
			return errors.New("kafka-dev exited")
		}
		conn, err := net.DialTimeout("tcp", k.Addr, 200*time.Millisecond)
		if err != nil {
			return err
		}
		conn.Close()
		return nil
	}); err != nil {
		k.t.Fatalf("kafka-dev on %s not accepting connections: %v\n%s", k.Addr, err, tailLines(k.LogPath, 20, 600))
	}
	k.t.Logf("kafka-dev (run %d) accepting on %s after %v", k.runs, k.Addr, time.Since(start).Round(time.Millisecond))
}

// Stop sends SIGTERM and waits for the broker to exit (SIGKILL after 10 s).
func (k *kafkaDev) Stop() {
	k.t.Helper()
	k.mu.Lock()
	proc := k.proc
	k.mu.Unlock()
	if proc == nil || proc.Exited() {
		return
	}
	_ = proc.Signal(syscall.SIGTERM)
	if _, ok := proc.Wait(10 * time.Second); !ok {
		k.t.Errorf("kafka-dev did not exit within 10s of SIGTERM; killing it")
		k.kill()
	}
}

func (k *kafkaDev) kill() {
	k.mu.Lock()
	proc := k.proc
	k.mu.Unlock()
	if proc == nil || proc.Exited() {
		return
	}
	if _, err := proc.Kill(10 * time.Second); err != nil {
		k.t.Errorf("kafka-dev: %v", err)
	}
}

// kafkaCluster is newCluster with kafka.brokers set in every node's config.
func kafkaCluster(t *testing.T, n int, broker string) *Cluster {
	t.Helper()
	c := newCluster(t, n, WithLogLevel("info"))
	for i := range n {
		spec := c.ConfigSpec(i)
		spec.Kafka.Brokers = []string{broker}
		if err := os.WriteFile(c.Node(i).ConfigPath, []byte(spec.YAML()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// ---------------------------------------------------------------------------
// The consumer

// consumed is one event record as a read_committed consumer saw it.
type consumed struct {
	fence.Published
	Timestamp time.Time // the record's timestamp
	Seen      time.Time // when this consumer received it
}

// eventConsumer reads the events topic read_committed from the start of
// partition 0, in the background, and keeps every record in offset order.
type eventConsumer struct {
	mu        sync.Mutex
	recs      []consumed
	bad       []string
	fetchErrs int
	lastErr   error

	cancel context.CancelFunc
	done   chan struct{}
}

func consumeEvents(t *testing.T, broker string) *eventConsumer {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(broker),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{eventsTopic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.DialTimeout(time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
	)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ec := &eventConsumer{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(ec.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			ec.mu.Lock()
			for _, fe := range fs.Errors() {
				if !errors.Is(fe.Err, context.Canceled) {
					ec.fetchErrs++
					ec.lastErr = fe.Err
				}
			}
			fs.EachRecord(func(r *kgo.Record) {
				p, err := fence.Decode(r)
				if err != nil {
					ec.bad = append(ec.bad, err.Error())
					return
				}
				ec.recs = append(ec.recs, consumed{Published: p, Timestamp: r.Timestamp, Seen: now})
			})
			ec.mu.Unlock()
			if fs.NumRecords() == 0 && len(fs.Errors()) > 0 {
				// Broker down: do not spin.
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	}()
	t.Cleanup(ec.close)
	return ec
}

func (ec *eventConsumer) close() {
	ec.cancel()
	<-ec.done
}

// records returns a copy of what was consumed so far.
func (ec *eventConsumer) records() []consumed {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	return slices.Clone(ec.recs)
}

// firstAbove returns the first record (in offset order) whose epoch is above e.
func (ec *eventConsumer) firstAbove(e int64) (consumed, bool) {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	for _, r := range ec.recs {
		if r.Epoch > e {
			return r, true
		}
	}
	return consumed{}, false
}

// waitUntil polls the records until cond holds or timeout passes, and
// returns them with cond's last error.
func (ec *eventConsumer) waitUntil(timeout time.Duration, cond func([]consumed) error) ([]consumed, error) {
	var recs []consumed
	err := testutil.Poll(timeout, pollEvery, func() error {
		recs = ec.records()
		return cond(recs)
	})
	return recs, err
}

// caughtUp holds once every acknowledged submit and every task of the final
// list has been seen.
func caughtUp(ops []bench.Op, final map[string]bool) func([]consumed) error {
	return func(recs []consumed) error {
		type atIndex struct {
			index uint64
			task  string
		}
		idx := map[atIndex]bool{}
		ids := map[string]bool{}
		for _, r := range recs {
			idx[atIndex{r.Index, r.Event.TaskID}] = true
			if r.Event.Kind == state.EventTaskSubmitted {
				ids[r.Event.TaskID] = true
			}
		}
		missing := 0
		var first string
		for _, op := range ops {
			if op.Kind == bench.Submit && op.Outcome == bench.OK && !idx[atIndex{op.Index, op.TaskID}] {
				if missing == 0 {
					first = fmt.Sprintf("acked submit %s at index %d", op.TaskID, op.Index)
				}
				missing++
			}
		}
		for id := range final {
			if !ids[id] {
				if missing == 0 {
					first = "task " + id + " of the final list"
				}
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d changes not yet seen downstream (%s, of %d records)", missing, first, len(recs))
		}
		return nil
	}
}

// finalTasks lists every task (linearizably) once the load has stopped.
func finalTasks(t *testing.T, c *Cluster) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tasks, err := c.Client().List(ctx, false)
	if err != nil {
		t.Fatalf("final list: %v", err)
	}
	final := map[string]bool{}
	for _, tk := range tasks {
		final[tk.TaskId] = true
	}
	return final
}

// drainAndCheck waits until the consumer has seen every acknowledged submit
// and every final task, then checks exactly-once delivery in Raft order.
func drainAndCheck(t *testing.T, ec *eventConsumer, ops []bench.Op, final map[string]bool) []consumed {
	t.Helper()
	start := time.Now()
	recs, err := ec.waitUntil(raceSlack(15*time.Second), caughtUp(ops, final))
	if err != nil {
		t.Errorf("downstream did not catch up within %v: %v", raceSlack(15*time.Second), err)
	} else {
		t.Logf("consumer caught up (waited %v): %d records", time.Since(start).Round(time.Millisecond), len(recs))
	}
	checkExactlyOnce(t, ec, recs, ops, final)
	return recs
}

// checkExactlyOnce checks what a read_committed consumer saw against the
// client history and the final task list: every acknowledged submit exactly
// once at its index, no index twice, indexes strictly increasing and terms
// and epochs never decreasing in offset order, and the published submits
// are exactly the tasks that exist.
//
// The epoch header is the epoch acquired by InitProducerId at the start of
// the term. With KIP-890 (EndTxn v5+, which kfake speaks) the coordinator
// bumps the epoch at every commit and rotates the producer id once the epoch
// nears 32767, after which an acquisition epoch starts low again: these
// tests stay far below that many transactions.
func checkExactlyOnce(t *testing.T, ec *eventConsumer, recs []consumed, ops []bench.Op, final map[string]bool) {
	t.Helper()
	ec.mu.Lock()
	bad, fetchErrs, lastErr := slices.Clone(ec.bad), ec.fetchErrs, ec.lastErr
	ec.mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("%d records are not xce events; first: %s", len(bad), bad[0])
	}
	if fetchErrs > 0 {
		t.Logf("consumer: %d fetch errors (last: %v)", fetchErrs, lastErr)
	}
	const maxReports = 10
	reports := map[string]int{}
	report := func(kind, format string, args ...any) {
		reports[kind]++
		if reports[kind] <= maxReports {
			t.Errorf(kind+": "+format, args...)
		}
	}
	// A change is named by (index, seq): the events of one batch entry
	// share its index.
	type change struct {
		index uint64
		seq   uint32
	}
	byChange := map[change][]consumed{}
	byIndex := map[uint64][]consumed{}
	submitted := map[string]int{}
	epochs := map[int64]int{}
	for i, r := range recs {
		byChange[change{r.Index, r.Seq}] = append(byChange[change{r.Index, r.Seq}], r)
		byIndex[r.Index] = append(byIndex[r.Index], r)
		epochs[r.Epoch]++
		if r.Event.Kind == state.EventTaskSubmitted {
			submitted[r.Event.TaskID]++
		}
		if r.Event.Index != r.Index || r.Event.Seq != r.Seq || r.Event.Term != r.Term {
			report("header mismatch", "offset %d: headers index=%d seq=%d term=%d, event index=%d seq=%d term=%d",
				r.Offset, r.Index, r.Seq, r.Term, r.Event.Index, r.Event.Seq, r.Event.Term)
		}
		if i == 0 {
			continue
		}
		prev := recs[i-1]
		if r.Offset <= prev.Offset {
			report("offset order", "offset %d after offset %d", r.Offset, prev.Offset)
		}
		if r.Index < prev.Index || r.Index == prev.Index && r.Seq <= prev.Seq {
			report("index order", "offset %d has index %d.%d (epoch %d) after offset %d with index %d.%d (epoch %d)",
				r.Offset, r.Index, r.Seq, r.Epoch, prev.Offset, prev.Index, prev.Seq, prev.Epoch)
		}
		if r.Epoch < prev.Epoch {
			report("epoch order", "offset %d has epoch %d after offset %d with epoch %d", r.Offset, r.Epoch, prev.Offset, prev.Epoch)
		}
		if r.Term < prev.Term {
			report("term order", "offset %d has term %d after offset %d with term %d", r.Offset, r.Term, prev.Offset, prev.Term)
		}
	}
	for ch, rs := range byChange {
		if len(rs) > 1 {
			var where []string
			for _, r := range rs {
				where = append(where, fmt.Sprintf("offset %d epoch %d", r.Offset, r.Epoch))
			}
			report("duplicate", "index %d.%d published %d times (%s)", ch.index, ch.seq, len(rs), strings.Join(where, ", "))
		}
	}
	acked, unknown := 0, 0
	for _, op := range ops {
		if op.Kind != bench.Submit {
			continue
		}
		switch op.Outcome {
		case bench.OK:
			acked++
			rs := byIndex[op.Index]
			mine := slices.ContainsFunc(rs, func(r consumed) bool {
				return r.Event.TaskID == op.TaskID && r.Event.Kind == state.EventTaskSubmitted
			})
			switch {
			case len(rs) == 0:
				report("missing", "acked submit %s (index %d) never published", op.TaskID, op.Index)
			case !mine:
				report("wrong event", "acked submit %s at index %d, but the %d records there are others' (first: %s %s)",
					op.TaskID, op.Index, len(rs), rs[0].Event.Kind, rs[0].Event.TaskID)
			}
			if submitted[op.TaskID] != 1 {
				report("submit count", "acked submit %s published %d times", op.TaskID, submitted[op.TaskID])
			}
		case bench.Unknown:
			unknown++
		}
	}
	for id, n := range submitted {
		if !final[id] {
			report("published but absent", "task %s published (%d times) but not in the final list", id, n)
		}
	}
	for id := range final {
		if submitted[id] == 0 {
			report("present but unpublished", "task %s exists but was never published", id)
		}
	}
	var es []string
	for _, e := range slices.Sorted(func(yield func(int64) bool) {
		for e := range epochs {
			if !yield(e) {
				return
			}
		}
	}) {
		es = append(es, fmt.Sprintf("%d:%d", e, epochs[e]))
	}
	t.Logf("downstream: %d records, %d distinct indexes, %d tasks listed, %d acked submits (%d unknown); records per epoch %s",
		len(recs), len(byIndex), len(final), acked, unknown, strings.Join(es, " "))
}

// ---------------------------------------------------------------------------
// Observing the publisher

// waitPublishing waits until one live node is PRIMARY and publishing and the
// consumer has seen a record of its epoch; it returns that node and epoch.
// The node is found afresh on each look: a leader change before the
// scenario starts (a stalled heartbeat on a loaded machine) is not what the
// callers test, and they act on whichever primary publishes.
func waitPublishing(t *testing.T, c *Cluster, ec *eventConsumer) (int, int64) {
	t.Helper()
	p, epoch := -1, int64(-1)
	if err := testutil.Poll(raceSlack(15*time.Second), pollEvery, func() error {
		p = -1
		publishing := 0
		var desc []string
		for _, i := range c.Live() {
			s, err := c.Status(i)
			if err != nil {
				desc = append(desc, fmt.Sprintf("%s: %v", c.Node(i).ID, err))
				continue
			}
			desc = append(desc, fmt.Sprintf("%s: %s, kafka %q epoch %d lag %d", s.NodeId, roleName(s.Role), s.KafkaState, s.KafkaEpoch, s.OutboxLag))
			if s.Role == xcev1.Role_ROLE_PRIMARY && s.KafkaState == fence.StatePublishing {
				p, epoch = i, int64(s.KafkaEpoch)
				publishing++
			}
		}
		if publishing != 1 {
			return fmt.Errorf("%d primaries publishing [%s]", publishing, strings.Join(desc, "; "))
		}
		if r, ok := ec.firstAbove(epoch - 1); !ok || r.Epoch != epoch {
			return fmt.Errorf("%s publishing, no record of epoch %d seen yet", c.Node(p).ID, epoch)
		}
		return nil
	}); err != nil {
		t.Fatalf("primary not publishing: %v", err)
	}
	return p, epoch
}

// failover is what a failover looked like from the outside.
type failover struct {
	newPrimary   int
	primaryAfter time.Duration // until a live node reported PRIMARY
	publishAfter time.Duration // until it reported kafka state "publishing"
	firstSeen    time.Duration // until the consumer saw a record of a newer epoch
	firstStamp   time.Duration // that record's timestamp, from the kill
	newEpoch     int64
	maxLag       uint64
	states       []string
}

// observeFailover polls the live nodes' status after node dead went away at
// t0, until a new primary is publishing and the consumer has seen a record
// of an epoch above old.
func observeFailover(t *testing.T, c *Cluster, dead int, ec *eventConsumer, old int64, t0 time.Time) failover {
	t.Helper()
	f := failover{newPrimary: -1}
	var lastState string
	err := testutil.Poll(raceSlack(10*time.Second), 20*time.Millisecond, func() error {
		for i := range c.N() {
			if i == dead || !c.Running(i) {
				continue
			}
			s, err := c.Status(i)
			if err != nil || s.Role != xcev1.Role_ROLE_PRIMARY {
				continue
			}
			el := time.Since(t0)
			if f.newPrimary != i {
				f.newPrimary, f.primaryAfter = i, el
			}
			f.maxLag = max(f.maxLag, s.OutboxLag)
			st := fmt.Sprintf("%s@%v(lag %d)", s.KafkaState, el.Round(time.Millisecond), s.OutboxLag)
			if s.KafkaState != lastState {
				f.states = append(f.states, st)
				lastState = s.KafkaState
			}
			if s.KafkaState == fence.StatePublishing && f.publishAfter == 0 {
				f.publishAfter = el
			}
		}
		if f.firstSeen == 0 {
			if r, ok := ec.firstAbove(old); ok {
				f.firstSeen, f.firstStamp, f.newEpoch = r.Seen.Sub(t0), r.Timestamp.Sub(t0), r.Epoch
			}
		}
		switch {
		case f.newPrimary < 0:
			return errors.New("no live node reports PRIMARY")
		case f.firstSeen == 0:
			return fmt.Errorf("no record of an epoch above %d seen (kafka states of %s: %v)", old, c.Node(f.newPrimary).ID, f.states)
		case f.publishAfter == 0:
			return fmt.Errorf("%s not publishing (states %v)", c.Node(f.newPrimary).ID, f.states)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("failover after %v: %v", time.Since(t0).Round(time.Millisecond), err)
	}
	return f
}

// others returns the node indexes other than p.
func others(c *Cluster, p int) []int {
	var out []int
	for i := range c.N() {
		if i != p {
			out = append(out, i)
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Tests

// TestFenceKillPrimaryTwice SIGKILLs the publishing primary twice under a
// 16-client write load: downstream sees every committed change exactly
// once, in Raft order, under non-decreasing epochs.
func TestFenceKillPrimaryTwice(t *testing.T) {
	k := startKafkaDev(t, false)
	c := kafkaCluster(t, 3, k.Addr)
	c.StartAll()
	c.WaitRoles(raceSlack(10 * time.Second))
	ec := consumeEvents(t, k.Addr)
	load := startLoad(t, c.Addrs(), 16)
	loadStart := time.Now()
	for kill := 1; kill <= 2; kill++ {
		load.waitProgress(t, 150, 30*time.Second)
		c.WaitRoles(20 * time.Second)
		p, epoch := waitPublishing(t, c, ec)
		t0 := time.Now()
		c.Kill(p)
		f := observeFailover(t, c, p, ec, epoch, t0)
		t.Logf("kill %d: SIGKILL %s (epoch %d); %s PRIMARY after %v, publishing after %v, max outbox_lag %d, kafka states %v",
			kill, c.Node(p).ID, epoch, c.Node(f.newPrimary).ID, f.primaryAfter.Round(time.Millisecond),
			f.publishAfter.Round(time.Millisecond), f.maxLag, f.states)
		t.Logf("kill %d: first record of epoch %d seen by the consumer %v after the kill (record timestamp +%v)",
			kill, f.newEpoch, f.firstSeen.Round(time.Millisecond), f.firstStamp.Round(time.Millisecond))
		if f.firstSeen > raceSlack(6*time.Second) {
			t.Errorf("kill %d: first record of the new epoch seen %v after the kill (> %v)", kill, f.firstSeen, raceSlack(6*time.Second))
		}
		c.Start(p)
		c.WaitRoles(raceSlack(20 * time.Second))
	}
	load.waitProgress(t, 150, 30*time.Second)
	loadStop := time.Now()
	ops := load.stopAndCheck(t, c.Client())
	final := finalTasks(t, c)
	recs := drainAndCheck(t, ec, ops, final)

	during := 0
	for _, r := range recs {
		if !r.Seen.Before(loadStart) && !r.Seen.After(loadStop) {
			during++
		}
	}
	d := loadStop.Sub(loadStart)
	rate := float64(during) / d.Seconds()
	t.Logf("publish throughput: %d records seen by the consumer during %v of load (2 failovers included): %.0f events/s",
		during, d.Round(time.Millisecond), rate)
	if rate < 10 {
		t.Errorf("publish throughput %.1f events/s (< 10)", rate)
	}
	// Sixteen writers share waves, and every node applies batch entries:
	// some events share an entry, numbered by xce-seq.
	batched := 0
	for _, r := range recs {
		if r.Seq > 0 {
			batched++
		}
	}
	t.Logf("%d of %d records were not the first of their entry", batched, len(recs))
	if batched == 0 {
		t.Error("no record shares an entry: writes never went in batch entries")
	}
}

// TestFenceZombiePrimary SIGSTOPs the primary until a newer one publishes,
// then resumes it: whatever it tries to publish late is rejected, no record
// of its epoch lands after the new epoch's first, and it leaves PRIMARY.
func TestFenceZombiePrimary(t *testing.T) {
	k := startKafkaDev(t, false)
	c := kafkaCluster(t, 3, k.Addr)
	c.StartAll()
	c.WaitRoles(raceSlack(10 * time.Second))
	ec := consumeEvents(t, k.Addr)
	load := startLoad(t, c.Addrs(), 4)
	load.waitProgress(t, 50, 30*time.Second)
	p, old := waitPublishing(t, c, ec)
	before := strings.Count(c.RunLog(p), `"from":"PRIMARY"`)

	t0 := time.Now()
	c.Signal(p, syscall.SIGSTOP)
	t.Cleanup(func() { c.Signal(p, syscall.SIGCONT) }) // before the harness's kill
	np, _, err := c.waitRolesAmong(raceSlack(10*time.Second), others(c, p))
	if err != nil {
		t.Fatalf("no new primary while %s is stopped: %v", c.Node(p).ID, err)
	}
	primaryAfter := time.Since(t0)
	first, err := ec.waitUntil(raceSlack(10*time.Second), func(recs []consumed) error {
		for _, r := range recs {
			if r.Epoch > old {
				return nil
			}
		}
		return fmt.Errorf("no record above epoch %d among %d", old, len(recs))
	})
	if err != nil {
		t.Fatalf("new primary %s did not publish: %v", c.Node(np).ID, err)
	}
	fr, _ := ec.firstAbove(old)
	t.Logf("SIGSTOP %s (epoch %d): %s PRIMARY after %v; first record of epoch %d (offset %d, index %d) seen after %v (%d records so far)",
		c.Node(p).ID, old, c.Node(np).ID, primaryAfter.Round(time.Millisecond), fr.Epoch, fr.Offset, fr.Index,
		fr.Seen.Sub(t0).Round(time.Millisecond), len(first))
	load.waitProgress(t, 20, 30*time.Second)

	t1 := time.Now()
	c.Signal(p, syscall.SIGCONT)
	var last *xcev1.StatusResponse
	if err := testutil.Poll(raceSlack(5*time.Second), pollEvery, func() error {
		s, err := c.Status(p)
		if err != nil {
			return err
		}
		last = s
		if s.Role == xcev1.Role_ROLE_PRIMARY {
			return fmt.Errorf("still PRIMARY: %s", describeStatus(s))
		}
		return nil
	}); err != nil {
		t.Errorf("%s after SIGCONT: %v", c.Node(p).ID, err)
	} else {
		t.Logf("SIGCONT %s: not PRIMARY after %v: %s, kafka %q", c.Node(p).ID, time.Since(t1).Round(time.Millisecond), describeStatus(last), last.KafkaState)
	}
	c.WaitRoles(raceSlack(10 * time.Second))
	load.waitProgress(t, 30, 30*time.Second)
	ops := load.stopAndCheck(t, c.Client())
	final := finalTasks(t, c)
	recs := drainAndCheck(t, ec, ops, final)

	// No record of the old epoch after the first of a newer one.
	fr, _ = ec.firstAbove(old)
	late := 0
	for _, r := range recs {
		if r.Epoch <= old && r.Offset > fr.Offset {
			late++
			if late <= 5 {
				t.Errorf("record of epoch %d (index %d) at offset %d, after the first record of epoch %d at offset %d",
					r.Epoch, r.Index, r.Offset, fr.Epoch, fr.Offset)
			}
		}
	}
	if late > 0 {
		t.Errorf("%d records of the deposed epoch %d landed after the new epoch began", late, old)
	}

	runLog := c.RunLog(p)
	switch {
	case strings.Contains(runLog, "FENCED"):
		for _, l := range strings.Split(runLog, "\n") {
			if strings.Contains(l, "FENCED") {
				t.Logf("zombie %s was fenced by Kafka: %s", c.Node(p).ID, lastBytes(l, 400))
				break
			}
		}
	case strings.Count(runLog, `"from":"PRIMARY"`) > before:
		for _, l := range strings.Split(runLog, "\n") {
			if strings.Contains(l, `"from":"PRIMARY"`) {
				t.Logf("zombie %s stepped down before publishing (saw the new term first): %s", c.Node(p).ID, lastBytes(l, 400))
			}
		}
	default:
		t.Errorf("zombie %s's log shows neither FENCED nor a step-down from PRIMARY", c.Node(p).ID)
	}
}

// TestFenceBrokerDown stops the broker for 10 s under load: the primary
// keeps acknowledging writes, its outbox lags, and once the broker is back
// (same address and data dir) the outbox drains with nothing lost or
// duplicated downstream.
func TestFenceBrokerDown(t *testing.T) {
	k := startKafkaDev(t, true)
	c := kafkaCluster(t, 3, k.Addr)
	c.StartAll()
	c.WaitRoles(raceSlack(10 * time.Second))
	ec := consumeEvents(t, k.Addr)
	load := startLoad(t, c.Addrs(), 8)
	load.waitProgress(t, 50, 30*time.Second)
	p, epoch := waitPublishing(t, c, ec)

	k.Stop()
	t0 := time.Now()
	ackedAtDown := load.acked()
	const outage = 10 * time.Second
	timer := time.NewTimer(outage) // the outage is the scenario itself
	defer timer.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var (
		maxLag       uint64
		lagAt        time.Duration = -1
		notPubAt     time.Duration = -1
		states       []string
		lastState    string
		statusErrs   int
		notPrimary   int
		ackedHalfway = -1
	)
outage:
	for {
		select {
		case <-timer.C:
			break outage
		case <-tick.C:
		}
		el := time.Since(t0)
		if ackedHalfway < 0 && el >= outage/2 {
			ackedHalfway = load.acked()
		}
		s, err := c.Status(p)
		if err != nil {
			statusErrs++
			continue
		}
		if s.Role != xcev1.Role_ROLE_PRIMARY {
			notPrimary++
		}
		maxLag = max(maxLag, s.OutboxLag)
		if s.OutboxLag > 0 && lagAt < 0 {
			lagAt = el
		}
		if s.KafkaState != fence.StatePublishing && notPubAt < 0 {
			notPubAt = el
		}
		if s.KafkaState != lastState {
			states = append(states, fmt.Sprintf("%q@%v", s.KafkaState, el.Round(time.Millisecond)))
			lastState = s.KafkaState
		}
	}
	ackedAtUp := load.acked()
	t.Logf("broker down %v: acked submits %d -> %d (halfway %d); %s outbox_lag max %d (first > 0 after %v), kafka state first not publishing after %v, states %v; %d status errors, %d samples not PRIMARY",
		time.Since(t0).Round(time.Millisecond), ackedAtDown, ackedAtUp, ackedHalfway, c.Node(p).ID, maxLag, lagAt, notPubAt, states, statusErrs, notPrimary)
	if ackedHalfway <= ackedAtDown || ackedAtUp <= ackedHalfway {
		t.Errorf("writes not acknowledged throughout the outage: %d at the stop, %d halfway, %d at the end", ackedAtDown, ackedHalfway, ackedAtUp)
	}
	if maxLag == 0 {
		t.Errorf("%s never reported outbox_lag > 0 while the broker was down", c.Node(p).ID)
	}
	if notPubAt < 0 {
		t.Errorf("%s reported kafka_state %q throughout the outage", c.Node(p).ID, fence.StatePublishing)
	}
	if notPrimary > 0 {
		t.Errorf("%s left PRIMARY %d times while the broker was down (Kafka down must not depose the primary)", c.Node(p).ID, notPrimary)
	}

	k.Start()
	t1 := time.Now()
	var drained *xcev1.StatusResponse
	var lagMax uint64
	if err := testutil.Poll(raceSlack(20*time.Second), pollEvery, func() error {
		s, err := c.Status(p)
		if err != nil {
			return err
		}
		lagMax = max(lagMax, s.OutboxLag)
		if s.OutboxLag != 0 || s.KafkaState != fence.StatePublishing {
			return fmt.Errorf("%s: kafka %q epoch %d outbox_lag %d", s.NodeId, s.KafkaState, s.KafkaEpoch, s.OutboxLag)
		}
		drained = s
		return nil
	}); err != nil {
		t.Errorf("outbox did not drain within %v of the broker's return: %v", raceSlack(20*time.Second), err)
	} else {
		t.Logf("broker back: %s's outbox drained (lag %d -> 0) after %v; kafka %q epoch %d (was %d)",
			c.Node(p).ID, lagMax, time.Since(t1).Round(time.Millisecond), drained.KafkaState, drained.KafkaEpoch, epoch)
		if d := time.Since(t1); d > 20*time.Second {
			t.Errorf("drain took %v (> 20s)", d)
		}
	}
	load.waitProgress(t, 30, 30*time.Second)
	ops := load.stopAndCheck(t, c.Client())
	final := finalTasks(t, c)
	drainAndCheck(t, ec, ops, final)
}
