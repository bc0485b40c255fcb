package kvworker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/internal/kafkaerr"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/worker"
)

const parts = 2

// broker starts an in-process kfake broker with the worker's topics.
func broker(t testing.TB) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.SeedTopics(parts, DefaultInputTopic, DefaultChangelogTopic, DefaultOutputTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// ctxFence lets a copy act until its context ends: the handler runs here
// without the worker library, whose Fence knows only its own copies.
func ctxFence(ctx context.Context) error { return context.Cause(ctx) }

func handler(t testing.TB, brokers []string, batch int) *Handler {
	t.Helper()
	h, err := New(Config{Brokers: brokers, StoreDir: t.TempDir(), BatchMax: batch, TxnTimeout: 5 * time.Second,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel), Fence: ctxFence})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// produceInput writes n records to input partition p, keys k0..k9 in turn.
func produceInput(t *testing.T, brokers []string, p int32, from, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for i := from; i < from+n; i++ {
		rs = append(rs, &kgo.Record{Topic: DefaultInputTopic, Partition: p, Key: []byte(fmt.Sprintf("k%d", i%10)), Value: []byte("x")})
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// committed is the task's committed input offset (-1: none).
func committed(t *testing.T, brokers []string, task string, p int32) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(kadm.RequireStable(context.Background()), Group(task))
	if err != nil {
		return -1
	}
	if o, ok := offs.Lookup(DefaultInputTopic, p); ok && o.Err == nil {
		return o.At
	}
	return -1
}

// readOutput reads the output topic read_committed to its end and counts
// each xce-input header. It fails the test unless each key's values, in
// the order of its partition, are 1, 2, 3…: the state the active counted
// from was right at every handover.
func readOutput(t *testing.T, brokers []string) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.ConsumeTopics(DefaultOutputTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, DefaultOutputTopic)
	if err != nil {
		t.Fatal(err)
	}
	pos := map[int32]int64{}
	done := func() bool {
		ok := true
		ends.Each(func(o kadm.ListedOffset) { ok = ok && pos[o.Partition] >= o.Offset })
		return ok
	}
	seen := map[string]int{}
	last := map[string]uint64{}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("output not read to its end: at %v, end %v", pos, ends)
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
				if h.Key == HeaderInput {
					seen[string(h.Value)]++
				}
			}
		})
	}
	return seen
}

// run runs one copy in a goroutine. stop cancels it and returns Run's
// error; done is closed once Run returned, and then err holds its error.
func run(h *Handler, c worker.Copy, lag *atomic.Int64, reports ...*atomic.Int64) (stop func() error, done <-chan struct{}, err *error) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan struct{})
	var rerr error
	go func() {
		defer close(ch)
		rerr = h.Run(ctx, c, func(l int64) {
			if lag != nil {
				lag.Store(l)
			}
			for _, r := range reports {
				r.Add(1)
			}
		})
	}()
	return func() error {
		cancel()
		<-ch
		return rerr
	}, ch, &rerr
}

// TestExactlyOnceAcrossRestart: an active processes part of the input and
// stops; a fresh active with an empty store elsewhere restores the counts
// from the changelog and continues from the committed offset. The output,
// read_committed, holds every input offset exactly once, and the counts
// are the input's.
func TestExactlyOnceAcrossRestart(t *testing.T) {
	brokers := broker(t)
	const n = 300
	produceInput(t, brokers, 0, 0, n)

	a := handler(t, brokers, 7)
	stopA, _, _ := run(a, worker.Copy{Task: "input-0", Role: worker.Active, Epoch: 1}, nil)
	testutil.Eventually(t, 20*time.Second, "the first active commits some input", func() bool {
		return committed(t, brokers, "input-0", 0) >= 50
	})
	if err := stopA(); err != nil {
		t.Fatalf("first active: %v", err)
	}
	mid := committed(t, brokers, "input-0", 0)
	produceInput(t, brokers, 0, n, n)

	b := handler(t, brokers, 50)
	stopB, _, _ := run(b, worker.Copy{Task: "input-0", Role: worker.Active, Epoch: 2}, nil)
	testutil.Eventually(t, 20*time.Second, "the second active commits all input", func() bool {
		return committed(t, brokers, "input-0", 0) == 2*n
	})
	if err := stopB(); err != nil {
		t.Fatalf("second active: %v", err)
	}
	t.Logf("first active committed %d of %d", mid, 2*n)

	seen := readOutput(t, brokers)
	for o := 0; o < 2*n; o++ {
		if c := seen[fmt.Sprintf("0:%d", o)]; c != 1 {
			t.Errorf("input offset %d is in the output %d times", o, c)
		}
	}
	if len(seen) != 2*n {
		t.Errorf("output has %d distinct inputs, want %d", len(seen), 2*n)
	}
	st, err := openStore(context.Background(), b.cfg.StoreDir, "input-0")
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	counts, err := st.all()
	if err != nil {
		t.Fatal(err)
	}
	for k := range 10 {
		if got := counts[fmt.Sprintf("k%d", k)]; got != 2*n/10 {
			t.Errorf("count of k%d = %d, want %d", k, got, 2*n/10)
		}
	}
}

// TestZombieCannotCommit: once a newer producer took the task's
// transactional id (a new active's InitProducerId), the old active's next
// transaction fails, its Run returns a fencing error, and nothing of it
// reaches the output or the committed offset.
func TestZombieCannotCommit(t *testing.T) {
	brokers := broker(t)
	produceInput(t, brokers, 1, 0, 20)
	a := handler(t, brokers, 10)
	stop, done, runErr := run(a, worker.Copy{Task: "input-1", Role: worker.Active, Epoch: 1}, nil)
	defer stop()
	testutil.Eventually(t, 20*time.Second, "the active commits its input", func() bool {
		return committed(t, brokers, "input-1", 1) == 20
	})

	// The new active's fence, alone: InitProducerId on the same id.
	nw, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(TransactionalID("input-1")))
	if err != nil {
		t.Fatal(err)
	}
	defer nw.Close()
	if _, _, err := nw.ProducerID(context.Background()); err != nil {
		t.Fatal(err)
	}

	produceInput(t, brokers, 1, 20, 20)
	select {
	case <-done:
		if err := *runErr; !kafkaerr.Fenced(err) {
			t.Fatalf("zombie's Run returned %v, want a fencing error", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the zombie did not stop")
	}
	if c := committed(t, brokers, "input-1", 1); c != 20 {
		t.Fatalf("committed offset %d after the fence, want 20", c)
	}
	seen := readOutput(t, brokers)
	for o := 20; o < 40; o++ {
		if c := seen[fmt.Sprintf("1:%d", o)]; c != 0 {
			t.Errorf("the zombie's output for input offset %d is visible", o)
		}
	}
	if len(seen) != 20 {
		t.Errorf("output has %d inputs, want 20", len(seen))
	}
}

// TestStandbyLagFallsToZero: a standby restores the changelog an active
// writes; its reported lag falls to 0 and its counts are the active's.
func TestStandbyLagFallsToZero(t *testing.T) {
	brokers := broker(t)
	produceInput(t, brokers, 0, 0, 100)
	a := handler(t, brokers, 10)
	stopA, _, _ := run(a, worker.Copy{Task: "input-0", Role: worker.Active, Epoch: 1}, nil)
	defer stopA()
	testutil.Eventually(t, 20*time.Second, "the active commits its input", func() bool {
		return committed(t, brokers, "input-0", 0) == 100
	})

	s := handler(t, brokers, 0)
	var lag atomic.Int64
	lag.Store(-1)
	var reports atomic.Int64
	stopS, _, _ := run(s, worker.Copy{Task: "input-0", Role: worker.Standby, Epoch: 1}, &lag, &reports)
	testutil.Eventually(t, 20*time.Second, "the standby reports a lag", func() bool { return lag.Load() >= 0 })
	testutil.Eventually(t, 20*time.Second, "the standby's lag falls to 0", func() bool { return lag.Load() == 0 })
	produceInput(t, brokers, 0, 100, 50)
	testutil.Eventually(t, 20*time.Second, "the active commits more", func() bool {
		return committed(t, brokers, "input-0", 0) == 150
	})
	// A report's end offset is looked up after the report before it: two
	// reports from now, the lag is measured against the new end.
	from := reports.Load()
	testutil.Eventually(t, 20*time.Second, "the standby catches up again", func() bool {
		return reports.Load() >= from+2 && lag.Load() == 0
	})
	if err := stopS(); err != nil {
		t.Fatal(err)
	}
	st, err := openStore(context.Background(), s.cfg.StoreDir, "input-0")
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	counts, err := st.all()
	if err != nil {
		t.Fatal(err)
	}
	for k := range 10 {
		if got := counts[fmt.Sprintf("k%d", k)]; got != 15 {
			t.Errorf("standby's count of k%d = %d, want 15", k, got)
		}
	}
}

func TestPartition(t *testing.T) {
	for _, tc := range []struct {
		task string
		p    int32
		ok   bool
	}{
		{"input-0", 0, true}, {"input-5", 5, true}, {"input-12", 12, true},
		{"input-", 0, false}, {"input-01", 0, false}, {"input--1", 0, false}, {"x-1", 0, false}, {"input-a", 0, false},
	} {
		p, err := Partition(tc.task)
		if (err == nil) != tc.ok || p != tc.p {
			t.Errorf("Partition(%q) = %d, %v", tc.task, p, err)
		}
	}
}

// TestRoleChanges: a worker's store passes through active, standby and
// active again while another worker is active in between. The store an
// active leaves holds counts ahead of its changelog position; replaying
// from that position on the way back must still end at the right counts,
// and the output holds every input exactly once.
func TestRoleChanges(t *testing.T) {
	brokers := broker(t)
	a := handler(t, brokers, 9)
	b := handler(t, brokers, 13)
	want := 0
	step := func(h *Handler, epoch uint64, other *Handler) {
		t.Helper()
		produceInput(t, brokers, 0, want, 100)
		want += 100
		var stopOther func() error
		if other != nil {
			stopOther, _, _ = run(other, worker.Copy{Task: "input-0", Role: worker.Standby, Epoch: epoch}, nil)
		}
		stop, _, _ := run(h, worker.Copy{Task: "input-0", Role: worker.Active, Epoch: epoch}, nil)
		testutil.Eventually(t, 20*time.Second, "the active commits the input", func() bool {
			return committed(t, brokers, "input-0", 0) == int64(want)
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if stopOther != nil {
			if err := stopOther(); err != nil {
				t.Fatal(err)
			}
		}
	}
	step(a, 1, nil)
	step(b, 2, a)
	step(a, 3, b)
	step(b, 4, nil)
	step(a, 5, nil)

	seen := readOutput(t, brokers)
	for o := 0; o < want; o++ {
		if c := seen[fmt.Sprintf("0:%d", o)]; c != 1 {
			t.Errorf("input offset %d is in the output %d times", o, c)
		}
	}
	for _, h := range []*Handler{a} {
		st, err := openStore(context.Background(), h.cfg.StoreDir, "input-0")
		if err != nil {
			t.Fatal(err)
		}
		counts, err := st.all()
		st.close()
		if err != nil {
			t.Fatal(err)
		}
		for k := range 10 {
			if got := counts[fmt.Sprintf("k%d", k)]; got != uint64(want/10) {
				t.Errorf("count of k%d = %d, want %d", k, got, want/10)
			}
		}
	}
}

// TestStoreAheadOfChangelog: a store read from a broker whose log is gone
// is emptied, not mixed into the new changelog's state.
func TestStoreAheadOfChangelog(t *testing.T) {
	first := broker(t)
	a := handler(t, first, 10)
	produceInput(t, first, 0, 0, 100)
	stop, _, _ := run(a, worker.Copy{Task: "input-0", Role: worker.Active, Epoch: 1}, nil)
	testutil.Eventually(t, 20*time.Second, "the active commits its input", func() bool {
		return committed(t, first, "input-0", 0) == 100
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	second := broker(t)
	b, err := New(Config{Brokers: second, StoreDir: a.cfg.StoreDir, Logger: a.cfg.Logger, Fence: ctxFence})
	if err != nil {
		t.Fatal(err)
	}
	produceInput(t, second, 0, 0, 30)
	stop, _, _ = run(b, worker.Copy{Task: "input-0", Role: worker.Active, Epoch: 1}, nil)
	testutil.Eventually(t, 20*time.Second, "the active commits the new input", func() bool {
		return committed(t, second, "input-0", 0) == 30
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	readOutput(t, second) // counts 1, 2, 3 per key
	st, err := openStore(context.Background(), b.cfg.StoreDir, "input-0")
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	counts, err := st.all()
	if err != nil {
		t.Fatal(err)
	}
	for k := range 10 {
		if got := counts[fmt.Sprintf("k%d", k)]; got != 3 {
			t.Errorf("count of k%d = %d, want 3", k, got)
		}
	}
}

// TestStoreAheadOfASettlingTransaction: a store whose position is past the
// changelog's stable offset but within its log (a transaction it reflects
// has not settled yet) keeps its state: position waits for the stable
// offset instead of emptying the store as if the log were gone.
func TestStoreAheadOfASettlingTransaction(t *testing.T) {
	brokers := broker(t)
	h := handler(t, brokers, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("settling"),
		kgo.DefaultProduceTopic(DefaultChangelogTopic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Key: fmt.Appendf(nil, "k%d", i), Value: []byte("1")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := openStore(ctx, h.cfg.StoreDir, "input-0")
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	// The store already holds what the open transaction wrote, as an
	// active's store does right after its commit returned.
	if err := st.apply([]kv{{key: []byte("k0"), value: []byte("1")}}, 3); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	if end, err := h.changelogEnd(ctx, adm, 0); err != nil || end != 0 {
		t.Fatalf("stable offset with the transaction open: %d, %v; want 0", end, err)
	}
	// While the transaction is open, position waits (here until its
	// context ends) rather than empty the store.
	wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, _, err = h.position(wctx, adm, st, 0)
	wcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("position with the transaction open: %v, want it to wait", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if next, _, err := h.position(ctx, adm, st, 0); err != nil || next != 3 {
		t.Fatalf("position once committed: %d, %v; want 3 (the store kept)", next, err)
	}
	if n, err := st.count([]byte("k0")); err != nil || n != 1 {
		t.Fatalf("count of k0 = %d (%v), want 1: the store was emptied", n, err)
	}
}

// lateFetch is a changelog poll whose records arrive just as its context
// ends: the consumer has moved past them either way.
type lateFetch struct {
	cancel context.CancelFunc
	recs   []*kgo.Record
}

func (l lateFetch) PollRecords(context.Context, int) kgo.Fetches {
	l.cancel()
	return kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: DefaultChangelogTopic,
		Partitions: []kgo.FetchPartition{{Partition: 0, Records: l.recs}}}}}}
}

// TestReadChangelogKeepsRecordsOfALatePoll: records a poll returns as its
// deadline passes are applied; dropping them would leave the store without
// them while the consumer reads on after them.
func TestReadChangelogKeepsRecordsOfALatePoll(t *testing.T) {
	st, err := openStore(context.Background(), t.TempDir(), "input-0")
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	ctx, cancel := context.WithCancel(context.Background())
	recs := []*kgo.Record{
		{Offset: 7, Key: []byte("k1"), Value: []byte("3")},
		{Offset: 8, Key: []byte("k2"), Value: []byte("1")},
	}
	next, err := readChangelog(ctx, lateFetch{cancel: cancel, recs: recs}, st, 7)
	if err != nil {
		t.Fatal(err)
	}
	if next != 9 {
		t.Errorf("position after the poll = %d, want 9", next)
	}
	if got, _ := st.next(); got != 9 {
		t.Errorf("stored position = %d, want 9", got)
	}
	all, err := st.all()
	if err != nil {
		t.Fatal(err)
	}
	if all["k1"] != 3 || all["k2"] != 1 {
		t.Errorf("store holds %v, want k1=3 k2=1", all)
	}
}
