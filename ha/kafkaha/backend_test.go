package kafkaha

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/ha/succession"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/state"
)

type member struct {
	id  string
	fsm *state.FSM
	b   *Backend
	dir string
}

func testConfig(brokers []string, id string, stagger int64) Config {
	coord, state, txn := Names("xce", "t")
	return Config{
		Brokers: brokers, Member: id, Role: "primary",
		CoordTopic: coord, StateTopic: state, TransactionalID: txn,
		Lease:            succession.LeaseConfig{LeaseMillis: 1000, RenewMillis: 300, StaggerMillis: stagger},
		SnapshotInterval: time.Hour,
		Logger:           zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true, TimeFormat: "15:04:05.000"}).Level(testLogLevel()).With().Timestamp().Str("m", id).Logger(),
	}
}

// testLogLevel is warn unless XCE_TEST_LOG names another level.
func init() { zerolog.TimeFieldFormat = time.RFC3339Nano }

func testLogLevel() zerolog.Level {
	if l, err := zerolog.ParseLevel(os.Getenv("XCE_TEST_LOG")); err == nil && os.Getenv("XCE_TEST_LOG") != "" {
		return l
	}
	return zerolog.WarnLevel
}

func startMember(t *testing.T, brokers []string, id, dir string, stagger int64) *member {
	t.Helper()
	return startMemberWith(t, brokers, id, dir, stagger, nil)
}

// startMemberWith is startMember with the config adjusted by mod.
func startMemberWith(t *testing.T, brokers []string, id, dir string, stagger int64, mod func(*Config)) *member {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	snaps, err := raft.NewFileSnapshotStore(dir, 2, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	fsm := state.NewFSM("t")
	cfg := testConfig(brokers, id, stagger)
	if mod != nil {
		mod(&cfg)
	}
	b, err := Start(cfg, fsm, snaps)
	if err != nil {
		t.Fatal(err)
	}
	m := &member{id: id, fsm: fsm, b: b, dir: dir}
	t.Cleanup(func() { _ = b.Shutdown() })
	return m
}

func leader(m *member) bool { return m.b.View().State == ha.StateLeader }

// becomePrimary waits until m holds the role and runs its barrier.
// A barrier that stalls (see Barrier) gives the role up and the member
// challenges again, as the controller would retry; so does this helper.
func becomePrimary(t *testing.T, m *member) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		testutil.Eventually(t, time.Until(deadline), m.id+" to hold the role", func() bool { return leader(m) })
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := m.b.Barrier(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || !errors.Is(err, ErrNotLeader) {
			t.Fatalf("%s barrier: %v", m.id, err)
		}
		t.Logf("%s barrier: %v; the member challenges again", m.id, err)
	}
}

func submit(t *testing.T, m *member, id string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := state.Command{Type: state.CmdSubmitTask, ClientID: "c", RequestID: id, Task: state.Task{ID: id}}
	resp, idx, err := m.b.Apply(ctx, c.Encode())
	if err != nil {
		t.Fatalf("%s apply %s: %v", m.id, id, err)
	}
	if r, ok := resp.(state.Result); !ok || r.Code != state.CodeOK {
		t.Fatalf("%s apply %s: %+v", m.id, id, resp)
	}
	return idx
}

// newKafka starts a kfake cluster with the role's topics created the way
// the members create them (a member started before they exist waits about
// a second for kgo to look for them again). Once the test's members have
// shut down, no goroutine of theirs may remain.
func newKafka(t *testing.T) []string {
	t.Helper()
	t.Cleanup(func() { checkNoLeaks(t) })
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	b := &Backend{cfg: testConfig(brokers, "setup", 0), plain: cl}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.ensureTopics(ctx); err != nil {
		t.Fatal(err)
	}
	return brokers
}

// checkNoLeaks fails t when a goroutine of this package's backend (the
// loop, a writer, the tailer, a challenge...) outlives Shutdown.
func checkNoLeaks(t *testing.T) {
	t.Helper()
	var leaked []string
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		leaked = leaked[:0]
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "kafkaha.(*Backend)") || strings.Contains(g, "kafkaha.(*holder)") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			break
		}
		<-tick.C
	}
	if len(leaked) > 0 {
		t.Errorf("%d goroutines outlive Shutdown:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	}
}

// TestFailoverToStandby: a holds the role and writes; b tails and applies;
// a stops renewing; b takes over after the lease (+ one stagger), with
// every write a acknowledged, and a's later writes are refused.
func TestFailoverToStandby(t *testing.T) {
	brokers := newKafka(t)
	a := startMember(t, brokers, "a", "", 200)
	becomePrimary(t, a)
	b := startMember(t, brokers, "b", "", 200)
	for i := range 20 {
		submit(t, a, fmt.Sprintf("t%d", i))
	}
	testutil.Eventually(t, 10*time.Second, "b to apply a's writes", func() bool { return b.fsm.NumTasks() == 20 })
	// b folds the coordination topic apart from tailing the state topic.
	testutil.Eventually(t, 5*time.Second, "b to follow a", func() bool {
		v := b.b.View()
		return v.State == ha.StateFollower && v.LeaderID == "a"
	})
	if r, ok := b.b.Info().Roster, true; !ok || len(r) != 2 || r[0].Member != "a" || r[1].Member != "b" {
		t.Fatalf("roster %+v", r)
	}

	// a dies without handing over.
	killed := time.Now()
	a.b.Shutdown()
	becomePrimary(t, b)
	took := time.Since(killed)
	t.Logf("takeover after %v (lease 1s, stagger 200ms)", took)
	if took < 500*time.Millisecond {
		t.Fatalf("b took over after %v, before a's lease could run out", took)
	}
	if b.fsm.NumTasks() != 20 {
		t.Fatalf("b has %d tasks after taking over, want 20", b.fsm.NumTasks())
	}
	submit(t, b, "after")
	if b.fsm.NumTasks() != 21 {
		t.Fatal("write on the new holder not applied")
	}
}

// TestRestartLandsAtTheTail: a restarted member registers again at the tail
// and does not take the role back; its snapshot spares replaying.
func TestRestartLandsAtTheTail(t *testing.T) {
	brokers, a, b, _ := standbyStoppedBehind(t)
	if n := snapshotTasks(t, b.dir); n != 5 {
		t.Fatalf("b's snapshot holds %d tasks, want 5", n)
	}
	b2 := startMember(t, brokers, "b", b.dir, 100)
	testutil.Eventually(t, 10*time.Second, "b to catch up", func() bool { return b2.fsm.NumTasks() == 10 })
	// It restored the snapshot and replayed only what came after: none of
	// the first five writes reached its FSM again (the dedup table would
	// have answered it).
	if n := b2.fsm.DedupHits(); n != 0 {
		t.Fatalf("the restarted member applied %d records of its snapshot again", n)
	}
	testutil.Eventually(t, 5*time.Second, "b at the tail", func() bool {
		r := b2.b.Info().Roster
		return len(r) == 2 && r[0].Member == "a" && r[1].Member == "b" && r[1].Offset > r[0].Offset
	})
	if !leader(a) || leader(b2) {
		t.Fatal("the restarted member took the role")
	}
}

// standbyStoppedBehind runs a (holder) and b (standby); b applies t0..t4,
// shuts down, and a writes t5..t9 without it. It returns the indexes of
// the last five writes.
func standbyStoppedBehind(t *testing.T) (brokers []string, a, b *member, idx []uint64) {
	t.Helper()
	brokers = newKafka(t)
	a = startMember(t, brokers, "a", "", 100)
	becomePrimary(t, a)
	b = startMember(t, brokers, "b", "", 100)
	for i := range 5 {
		submit(t, a, fmt.Sprintf("t%d", i))
	}
	testutil.Eventually(t, 10*time.Second, "b to apply", func() bool { return b.fsm.NumTasks() == 5 })
	b.b.Shutdown()
	for i := 5; i < 10; i++ {
		idx = append(idx, submit(t, a, fmt.Sprintf("t%d", i)))
	}
	return brokers, a, b, idx
}

// snapshotTasks restores the latest snapshot in dir and counts its tasks.
func snapshotTasks(t *testing.T, dir string) int {
	t.Helper()
	snaps, err := raft.NewFileSnapshotStore(dir, 2, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	metas, err := snaps.List()
	if err != nil || len(metas) == 0 {
		t.Fatalf("no snapshot in %s: %v", dir, err)
	}
	_, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	fsm := state.NewFSM("t")
	if err := fsm.Restore(rc); err != nil {
		t.Fatal(err)
	}
	return fsm.NumTasks()
}

// TestHandOver: TransferLeadership makes the next member hold the role.
func TestHandOver(t *testing.T) {
	brokers := newKafka(t)
	a := startMember(t, brokers, "a", "", 100)
	becomePrimary(t, a)
	b := startMember(t, brokers, "b", "", 100)
	submit(t, a, "x")
	testutil.Eventually(t, 10*time.Second, "b registered", func() bool { return len(a.b.Info().Roster) == 2 })
	start := time.Now()
	if err := a.b.TransferLeadership(); err != nil {
		t.Fatal(err)
	}
	becomePrimary(t, b)
	t.Logf("hand-over took %v", time.Since(start))
	if leader(a) {
		t.Fatal("a still holds the role")
	}
	if b.fsm.NumTasks() != 1 {
		t.Fatal("b lacks a's write")
	}
	testutil.Eventually(t, 5*time.Second, "a at the tail", func() bool {
		r := b.b.Info().Roster
		return len(r) == 2 && r[0].Member == "b" && r[1].Member == "a"
	})
}

// TestSimultaneousChallenges: with stagger 0 and the holder gone, every
// member challenges at once; several may win one after the other (each
// fencing the one before), but at most one serves at any time, and the
// others learn that they lost.
func TestSimultaneousChallenges(t *testing.T) {
	brokers := newKafka(t)
	a := startMember(t, brokers, "a", "", 0)
	becomePrimary(t, a)
	ms := []*member{startMember(t, brokers, "b", "", 0), startMember(t, brokers, "c", "", 0), startMember(t, brokers, "d", "", 0)}
	testutil.Eventually(t, 10*time.Second, "all registered", func() bool { return len(a.b.Info().Roster) == 4 })
	// Like the controller, each member runs its barrier once it holds.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, m := range ms {
		wg.Go(func() {
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for ctx.Err() == nil {
				if leader(m) {
					bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
					_ = m.b.Barrier(bctx)
					bcancel()
				}
				select {
				case <-ctx.Done():
				case <-tick.C:
				}
			}
		})
	}
	a.b.Shutdown()
	var serving, holding int
	count := func() {
		serving, holding = 0, 0
		for _, m := range ms {
			if m.b.VerifyLeader(ctx) == nil {
				serving++
			}
			if leader(m) {
				holding++
			}
		}
	}
	testutil.Eventually(t, 10*time.Second, "a member to serve", func() bool { count(); return serving > 0 })
	if observe(300*time.Millisecond, func() bool { count(); return serving > 1 }) {
		t.Fatalf("%d members serve at once", serving)
	}
	testutil.Eventually(t, 5*time.Second, "the others to learn that they lost", func() bool { count(); return holding == 1 && serving == 1 })
}
