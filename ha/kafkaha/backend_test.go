package kafkaha

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/ha/succession"
	"github.com/xce/xce/persist"
)

type member struct {
	id  string
	fsm *persist.FSM
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
		Logger:           zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}).Level(testLogLevel()).With().Str("m", id).Logger(),
	}
}

// testLogLevel is warn unless XCE_TEST_LOG names another level.
func testLogLevel() zerolog.Level {
	if l, err := zerolog.ParseLevel(os.Getenv("XCE_TEST_LOG")); err == nil && os.Getenv("XCE_TEST_LOG") != "" {
		return l
	}
	return zerolog.WarnLevel
}

func startMember(t *testing.T, brokers []string, id, dir string, stagger int64) *member {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	snaps, err := raft.NewFileSnapshotStore(dir, 2, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	fsm := persist.NewFSM("t")
	b, err := Start(testConfig(brokers, id, stagger), fsm, snaps)
	if err != nil {
		t.Fatal(err)
	}
	m := &member{id: id, fsm: fsm, b: b, dir: dir}
	t.Cleanup(func() { _ = b.Shutdown() })
	return m
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tick.C
	}
}

func leader(m *member) bool { return m.b.View().State == ha.StateLeader }

// becomePrimary waits until m holds the role and runs its barrier.
func becomePrimary(t *testing.T, m *member) {
	t.Helper()
	waitFor(t, 10*time.Second, m.id+" to hold the role", func() bool { return leader(m) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.b.Barrier(ctx); err != nil {
		t.Fatalf("%s barrier: %v", m.id, err)
	}
}

func submit(t *testing.T, m *member, id string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := persist.Command{Type: persist.CmdSubmitTask, ClientID: "c", RequestID: id, Task: persist.Task{ID: id}}
	resp, idx, err := m.b.Apply(ctx, c.Encode())
	if err != nil {
		t.Fatalf("%s apply %s: %v", m.id, id, err)
	}
	if r, ok := resp.(persist.Result); !ok || r.Code != persist.CodeOK {
		t.Fatalf("%s apply %s: %+v", m.id, id, resp)
	}
	return idx
}

func newKafka(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
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
	waitFor(t, 10*time.Second, "b to apply a's writes", func() bool { return b.fsm.NumTasks() == 20 })
	if v := b.b.View(); v.State != ha.StateFollower || v.LeaderID != "a" {
		t.Fatalf("b's view %+v, want follower of a", v)
	}
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
	brokers := newKafka(t)
	a := startMember(t, brokers, "a", "", 100)
	becomePrimary(t, a)
	b := startMember(t, brokers, "b", "", 100)
	for i := range 5 {
		submit(t, a, fmt.Sprintf("t%d", i))
	}
	waitFor(t, 10*time.Second, "b to apply", func() bool { return b.fsm.NumTasks() == 5 })
	b.b.Shutdown()
	for i := 5; i < 10; i++ {
		submit(t, a, fmt.Sprintf("t%d", i))
	}
	b2 := startMember(t, brokers, "b", b.dir, 100)
	if b2.fsm.NumTasks() != 5 {
		t.Fatalf("restored %d tasks from the snapshot, want 5", b2.fsm.NumTasks())
	}
	waitFor(t, 10*time.Second, "b to catch up", func() bool { return b2.fsm.NumTasks() == 10 })
	waitFor(t, 5*time.Second, "b at the tail", func() bool {
		r := b2.b.Info().Roster
		return len(r) == 2 && r[0].Member == "a" && r[1].Member == "b" && r[1].Offset > r[0].Offset
	})
	if !leader(a) || leader(b2) {
		t.Fatal("the restarted member took the role")
	}
}

// TestHandOver: TransferLeadership makes the next member hold the role.
func TestHandOver(t *testing.T) {
	brokers := newKafka(t)
	a := startMember(t, brokers, "a", "", 100)
	becomePrimary(t, a)
	b := startMember(t, brokers, "b", "", 100)
	submit(t, a, "x")
	waitFor(t, 10*time.Second, "b registered", func() bool { return len(a.b.Info().Roster) == 2 })
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
	waitFor(t, 5*time.Second, "a at the tail", func() bool {
		r := b.b.Info().Roster
		return len(r) == 2 && r[0].Member == "b" && r[1].Member == "a"
	})
}

// TestSimultaneousChallenges: with stagger 0 and the holder gone, every
// member challenges at once; exactly one ends holding the role.
func TestSimultaneousChallenges(t *testing.T) {
	brokers := newKafka(t)
	a := startMember(t, brokers, "a", "", 0)
	becomePrimary(t, a)
	ms := []*member{startMember(t, brokers, "b", "", 0), startMember(t, brokers, "c", "", 0), startMember(t, brokers, "d", "", 0)}
	waitFor(t, 10*time.Second, "all registered", func() bool { return len(a.b.Info().Roster) == 4 })
	a.b.Shutdown()
	waitFor(t, 10*time.Second, "a new holder", func() bool {
		for _, m := range ms {
			if leader(m) {
				return true
			}
		}
		return false
	})
	// Let the losers learn; then exactly one holds it, for a while.
	for range 20 {
		n := 0
		for _, m := range ms {
			if leader(m) {
				n++
			}
		}
		if n > 1 {
			t.Fatalf("%d members hold the role", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
