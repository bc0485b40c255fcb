package kafkaha

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/xce/xce/ha/succession"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/state"
)

// TestOpAfterWriterExitFails: a write, barrier or release that reaches a
// holder whose writer has exited (Apply read the holder just before it
// left) fails at once with ErrNotLeader; it used to be queued where nothing
// would ever answer it, and wait for its context.
func TestOpAfterWriterExitFails(t *testing.T) {
	brokers := newKafka(t)
	a := startMember(t, brokers, "a", "", 100)
	becomePrimary(t, a)
	h := a.b.currentHolder()
	a.b.lose(h, "test: the holder leaves")
	noop := (&state.Command{Type: state.CmdNoop}).Encode()
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		var err error
		switch i % 3 {
		case 0:
			_, err = h.barrier(ctx, noop)
		case 1:
			err = h.release(ctx)
		case 2:
			err = h.submit(ctx, &op{cmd: noop, done: make(chan opResult, 1)}).err
		}
		cancel()
		if !errors.Is(err, ErrNotLeader) || time.Since(start) > time.Second {
			t.Fatalf("op %d on a holder that left: %v after %v, want ErrNotLeader at once", i, err, time.Since(start))
		}
	}
}

// TestShutdownWhileTakingTheRole: Shutdown that runs while the loop installs
// the holder a challenge won must stop that holder's writer too (it used to
// miss it, and wait for it for ever). The challenge's commit is held at the
// connection and let go as Shutdown starts, so that the two race.
func TestShutdownWhileTakingTheRole(t *testing.T) {
	brokers := newKafka(t)
	for i := range 3 {
		g := newGate()
		g.hold(apiEndTxn)
		m := startMemberWith(t, brokers, "a", "", 100, g.use)
		t.Cleanup(g.openAll) // before Shutdown, should the test fail early
		// The member is alone: it challenges at once.
		<-g.held(apiEndTxn)
		shutdown := make(chan error, 1)
		go func() { shutdown <- m.b.Shutdown() }()
		g.openAll()
		select {
		case err := <-shutdown:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Shutdown hangs: the holder installed meanwhile keeps running", i)
		}
		if leader(m) {
			t.Fatalf("round %d: the member still holds the role after Shutdown", i)
		}
	}
}

// TestStartTailerBesideAWriter: once a holder applies its own writes, a
// late restart of the tailer (a stale Barrier used to do it) must not run a
// tailer beside it: both would apply the same records.
func TestStartTailerBesideAWriter(t *testing.T) {
	brokers := newKafka(t)
	a := startMember(t, brokers, "a", "", 100)
	becomePrimary(t, a)
	a.b.startTailer()
	for i := range 100 {
		submit(t, a, fmt.Sprintf("t%d", i))
	}
	if n := a.fsm.DedupHits(); n != 0 {
		t.Fatalf("%d records applied twice", n)
	}
	if a.fsm.NumTasks() != 100 || a.fsm.AppliedIndex() != a.b.AppliedIndex() {
		t.Fatalf("%d tasks, FSM at %d, backend at %d", a.fsm.NumTasks(), a.fsm.AppliedIndex(), a.b.AppliedIndex())
	}
}

// TestPausedHolderIsFenced: a holder paused inside a transaction (here:
// between producing and committing) while another member takes the role
// must see that transaction fenced, fail the write and leave; the standby
// never applies it, and no record of the old holder's epoch is committed
// after the new holder's first one.
func TestPausedHolderIsFenced(t *testing.T) {
	brokers := newKafka(t)
	g := newGate()
	a := startMemberWith(t, brokers, "a", "", 100, g.use)
	t.Cleanup(g.openAll) // before Shutdown, should the test fail early
	becomePrimary(t, a)
	b := startMember(t, brokers, "b", "", 100)
	for i := range 10 {
		submit(t, a, fmt.Sprintf("t%d", i))
	}
	testutil.Eventually(t, 10*time.Second, "b to apply a's writes", func() bool { return b.fsm.NumTasks() == 10 })

	// a stops reading the coordination topic (it would learn of b's lease
	// there and leave without writing): its fetches are held at the
	// connection (the holder's tailer is stopped, so they are all the
	// coordination consumer's). Then it pauses inside a transaction that
	// holds one write: the commit is held.
	g.hold(apiFetch)
	<-g.held(apiFetch)
	g.hold(apiEndTxn)
	stale := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c := state.Command{Type: state.CmdSubmitTask, ClientID: "c", RequestID: "stale", Task: state.Task{ID: "stale"}}
		_, _, err := a.b.Apply(ctx, c.Encode())
		stale <- err
	}()
	<-g.held(apiEndTxn)

	// Meanwhile b takes the role: a fresh epoch and a lease naming b (as a
	// challenge that b lost track of would leave it), which b reclaims.
	fenceWithLease(t, brokers, "b", testConfig(brokers, "b", 100).Lease)
	becomePrimary(t, b)
	submit(t, b, "after")
	// b acknowledged a write: a, which has heard of nothing yet, must no
	// longer confirm that it holds the role (linearizable reads).
	if err := a.b.VerifyLeader(context.Background()); err == nil {
		t.Fatal("two holders: a still verifies its lease after b acknowledged a write")
	}

	g.open(apiEndTxn)
	if err := <-stale; !errors.Is(err, ErrNotLeader) {
		t.Fatalf("the paused holder's write: %v, want ErrNotLeader", err)
	}
	testutil.Eventually(t, 5*time.Second, "a to leave", func() bool { return !leader(a) })
	g.open(apiFetch)

	if _, ok := b.fsm.Task("stale"); ok {
		t.Fatal("the new holder applied the fenced write")
	}
	testutil.Eventually(t, 10*time.Second, "a to apply b's writes", func() bool { return a.b.AppliedIndex() == b.b.AppliedIndex() })
	if _, ok := a.fsm.Task("stale"); ok {
		t.Fatal("the fenced holder applied its own fenced write")
	}
	ta, va := a.fsm.AllTasks()
	tb, vb := b.fsm.AllTasks()
	byID := func(x, y state.Task) int { return strings.Compare(x.ID, y.ID) }
	slices.SortFunc(ta, byID)
	slices.SortFunc(tb, byID)
	if len(ta) != 11 || va != vb || !slices.Equal(ta, tb) {
		t.Fatalf("the members' FSMs differ: %d tasks on a, %d on b", len(ta), len(tb))
	}
	checkStateOrder(t, brokers)
}

// TestOvertakenHolderYields: a holder overtaken by a challenge while its
// lease was live leaves as soon as it reads the new lease, and says so: the
// new holder serves then, not only once the old lease has run out.
func TestOvertakenHolderYields(t *testing.T) {
	brokers := newKafka(t)
	long := func(c *Config) {
		c.Lease = succession.LeaseConfig{LeaseMillis: 5000, RenewMillis: 1000, StaggerMillis: 100}
	}
	a := startMemberWith(t, brokers, "a", "", 100, long)
	becomePrimary(t, a)
	b := startMemberWith(t, brokers, "b", "", 100, long)
	submit(t, a, "x")
	testutil.Eventually(t, 10*time.Second, "b to follow", func() bool { return b.fsm.NumTasks() == 1 })
	start := time.Now()
	fenceWithLease(t, brokers, "b", succession.LeaseConfig{LeaseMillis: 5000, RenewMillis: 1000})
	testutil.Eventually(t, 10*time.Second, "b to hold the role", func() bool { return leader(b) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.b.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.b.VerifyLeader(ctx); err == nil {
		t.Fatal("a and b both hold the role")
	}
	// a renewed at most a second before: its lease had 4 s or more to run.
	if took := time.Since(start); took > 2500*time.Millisecond {
		t.Fatalf("b served %v after the challenge: it waited for a's lease to run out", took)
	}
	submit(t, b, "y")
}

// TestTailerNeverSkipsRecords: a member whose snapshot ends before the
// first record the state topic still holds (retention or a deletion took
// the ones in between) must not apply what follows the gap: its FSM would
// silently miss writes. It stops applying and says so.
func TestTailerNeverSkipsRecords(t *testing.T) {
	brokers, _, b, idx := standbyStoppedBehind(t)
	// The topic loses t5 and t6: it starts at t7 now.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs := make(kadm.Offsets)
	offs.AddOffset(testConfig(brokers, "b", 0).StateTopic, 0, int64(idx[2])-1, -1)
	resp, err := kadm.NewClient(cl).DeleteRecords(ctx, offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	b2 := startMember(t, brokers, "b", b.dir, 100)
	if observe(300*time.Millisecond, func() bool { return b2.fsm.NumTasks() != 5 }) {
		t.Fatalf("b applied past a gap in the state topic: %d tasks", b2.fsm.NumTasks())
	}
}

// fenceWithLease takes the role's transactional id (a new epoch, fencing
// the holder) and commits a lease naming member, as a challenge by member
// that member's loop lost track of would.
func fenceWithLease(t *testing.T, brokers []string, member string, lease succession.LeaseConfig) {
	t.Helper()
	cfg := testConfig(brokers, "fencer", 0)
	cfg.Lease = lease
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(cfg.TransactionalID),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k, v := succession.LeaseRecord(cfg.Role, cfg.Lease.Grant(succession.MemberID(member), time.Now().UnixMilli()))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: cfg.CoordTopic, Key: k, Value: v,
		Headers: []kgo.RecordHeader{{Key: headerChallenge, Value: []byte("1")}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
}

// checkStateOrder reads the state topic as a tailer does and checks that
// terms and producer epochs never go back: no record of an older holder is
// committed after a newer holder's first record.
func checkStateOrder(t *testing.T, brokers []string) {
	t.Helper()
	cfg := testConfig(brokers, "reader", 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.StateTopic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	end, err := listLSO(ctx, cl, cfg.StateTopic)
	if err != nil {
		t.Fatal(err)
	}
	var term uint64
	var epoch int16
	var n int
	// The last transaction's commit marker is at end-1: its last record
	// at end-2.
	for read := int64(-1); read < end-2; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading the state topic up to %d (at %d): %v", end, read, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			read = r.Offset
			n++
			if rt := termOf(r); rt < term || r.ProducerEpoch < epoch {
				t.Errorf("record %d: term %d epoch %d after term %d epoch %d", r.Offset, rt, r.ProducerEpoch, term, epoch)
			} else {
				term, epoch = rt, r.ProducerEpoch
			}
		})
	}
	if n == 0 {
		t.Fatal("no state records")
	}
}

// observe polls cond on a ticker for a fixed window and reports whether it
// held at some point.
func observe(d time.Duration, cond func() bool) bool {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); <-tick.C {
		if cond() {
			return true
		}
	}
	return cond()
}

// listLSO asks the partition leader for topic's last stable offset (the end
// of what read_committed consumers can read).
func listLSO(ctx context.Context, cl *kgo.Client, topic string) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	req.IsolationLevel = 1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = 0
	rp.Timestamp = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return 0, err
			}
			return p.Offset, nil
		}
	}
	return 0, fmt.Errorf("no offset for %s in the answer", topic)
}
