package integration

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/xce/xce/bench"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// The Kafka-coordinated backend (ha.backend: kafka) end to end: a kafka-dev
// broker process and xce servers that have no Raft quorum of their own.

// Lease and stagger of these tests; XCE_IT_KHA_LEASE and
// XCE_IT_KHA_STAGGER override them for measurements (e.g. the defaults,
// 3s and 500ms).
var (
	khaLease   = envDuration("XCE_IT_KHA_LEASE", time.Second)
	khaStagger = envDuration("XCE_IT_KHA_STAGGER", 300*time.Millisecond)
)

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d >= 0 {
		return d
	}
	return def
}

func kafkaHACluster(t *testing.T, n int, stagger time.Duration) (*Cluster, *kafkaDev) {
	t.Helper()
	k := startKafkaDev(t, false)
	c := newCluster(t, n, WithLogLevel("info"), WithConfig(func(cfg *configs.Config) {
		cfg.HA = configs.HA{Backend: configs.BackendKafka, Lease: configs.Duration{Duration: khaLease},
			Renew: configs.Duration{Duration: khaLease * 3 / 10}, Stagger: configs.Duration{Duration: stagger}}
		cfg.Kafka.Brokers = []string{k.Addr}
	}))
	return c, k
}

// firstAckAfter is the first acknowledged submit of the new primary after
// a kill at t: returned after t with an index above every index
// acknowledged until shortly after t (the dying primary's last answers
// may still be on their way at t).
func firstAckAfter(ops []bench.Op, t time.Time) (time.Time, bool) {
	var oldMax uint64
	for _, op := range ops {
		if op.Kind == bench.Submit && op.Outcome == bench.OK && op.Return.Before(t.Add(50*time.Millisecond)) {
			oldMax = max(oldMax, op.Index)
		}
	}
	var first time.Time
	for _, op := range ops {
		if op.Kind == bench.Submit && op.Outcome == bench.OK && op.Index > oldMax && op.Return.After(t) &&
			(first.IsZero() || op.Return.Before(first)) {
			first = op.Return
		}
	}
	return first, !first.IsZero()
}

func rosterOf(s *xcev1.StatusResponse) []string {
	var out []string
	for _, m := range s.Roster {
		out = append(out, fmt.Sprintf("%d:%s", m.Rank, m.MemberId))
	}
	return out
}

// stateRecord is one committed record of the state topic.
type stateRecord struct {
	offset int64
	term   uint64
}

// readStateTopic reads the whole state topic read_committed: until the
// read reaches the end the broker reports (transaction markers take offsets
// but are not delivered, so the last record may sit below it), or nothing
// more arrives for a second.
func readStateTopic(t *testing.T, broker string) []stateRecord {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"xce.it.state": {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lso, hw, err := offsetsOf(ctx, cl)
	if err != nil {
		t.Fatalf("state topic end: %v", err)
	}
	if lso != hw {
		t.Fatalf("a transaction is still open on the state topic after the load (last stable %d, high watermark %d)", lso, hw)
	}
	var out []stateRecord
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			var term uint64
			for _, h := range r.Headers {
				if h.Key == "xce-term" {
					term, _ = strconv.ParseUint(string(h.Value), 10, 64)
				}
			}
			out = append(out, stateRecord{offset: r.Offset, term: term})
		})
		if ctx.Err() != nil {
			t.Fatalf("reading the state topic: %v", ctx.Err())
		}
		if n == 0 || (len(out) > 0 && out[len(out)-1].offset >= lso-1) {
			return out
		}
	}
}

// loadedHolder starts a write load of the given clients on a started
// cluster and returns it with the PRIMARY once writes flow. Both members
// may challenge at start and the later challenge wins after a first
// PRIMARY showed, so the holder is only taken once the load has made
// progress.
func loadedHolder(t *testing.T, c *Cluster, clients int) (*loadRun, int) {
	t.Helper()
	c.WaitRoles(raceSlack(20 * time.Second))
	l := startLoad(t, c.Addrs(), clients)
	l.waitProgress(t, 200, raceSlack(20*time.Second))
	return l, c.WaitRoles(raceSlack(20 * time.Second))
}

// TestKafkaHAKillPrimary: two servers, a write load; SIGKILL the PRIMARY:
// the standby serves within lease + stagger + 1 s, nothing acknowledged is
// lost and the history is linearizable; the killed node comes back as
// STANDBY at the tail of the roster and the PRIMARY does not change.
func TestKafkaHAKillPrimary(t *testing.T) {
	c, _ := kafkaHACluster(t, 2, khaStagger)
	c.StartAll()
	l, p := loadedHolder(t, c, 16)
	s := 1 - p

	killed := time.Now()
	c.Kill(p)
	if got := c.WaitRoles(raceSlack(15 * time.Second)); got != s {
		t.Fatalf("primary is %d after the kill, want %d", got, s)
	}
	became := time.Since(killed)
	l.waitProgress(t, 200, raceSlack(20*time.Second))
	first, ok := firstAckAfter(l.hist.Ops(), killed)
	if !ok {
		t.Fatal("no write acknowledged after the kill")
	}
	failover := first.Sub(killed)
	t.Logf("SIGKILL -> standby PRIMARY %v; -> first acknowledged write %v (lease %v, stagger %v)",
		became.Round(time.Millisecond), failover.Round(time.Millisecond), khaLease, khaStagger)
	if limit := khaLease + khaStagger + raceSlack(time.Second); failover > limit {
		t.Errorf("failover took %v, more than lease + stagger + 1 s (%v)", failover, limit)
	}

	// The killed node returns at the tail; no failback.
	c.Start(p)
	if got := c.WaitRoles(raceSlack(20 * time.Second)); got != s {
		t.Fatalf("primary changed to %d when the killed node came back", got)
	}
	st, err := c.Status(s)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"0:" + c.nodes[s].ID, "1:" + c.nodes[p].ID}; !slices.Equal(rosterOf(st), want) {
		t.Errorf("roster %v, want %v", rosterOf(st), want)
	}
	l.waitProgress(t, 100, raceSlack(20*time.Second))
	l.stopAndCheck(t, c.Client())
	if got := c.WaitRoles(raceSlack(5 * time.Second)); got != s {
		t.Fatalf("primary changed to %d", got)
	}
}

// TestKafkaHAPausedPrimaryIsFenced: SIGSTOP the PRIMARY past its lease; the
// standby takes over; on SIGCONT the old node's renewal and writes are
// fenced and it leaves PRIMARY; in the state topic no record of the old
// term is committed after the new holder's first record.
func TestKafkaHAPausedPrimaryIsFenced(t *testing.T) {
	c, k := kafkaHACluster(t, 2, khaStagger)
	c.StartAll()
	l, p := loadedHolder(t, c, 8)
	s := 1 - p
	old, err := c.Status(p)
	if err != nil {
		t.Fatal(err)
	}
	if old.Role != xcev1.Role_ROLE_PRIMARY {
		t.Fatalf("node %d: %s, want the PRIMARY it was a moment ago", p, describeStatus(old))
	}

	c.Signal(p, syscall.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			c.Signal(p, syscall.SIGCONT)
		}
	}()
	if err := testutil.Poll(khaLease+khaStagger+raceSlack(10*time.Second), pollEvery, func() error {
		st, err := c.Status(s)
		if err != nil {
			return err
		}
		if st.Role != xcev1.Role_ROLE_PRIMARY || !st.WriteQuorum {
			return fmt.Errorf("%s", describeStatus(st))
		}
		return nil
	}); err != nil {
		t.Fatalf("the standby did not take over from the paused primary: %v", err)
	}
	l.waitProgress(t, 100, raceSlack(20*time.Second))
	c.Signal(p, syscall.SIGCONT)
	stopped = false
	if got := c.WaitRoles(raceSlack(15 * time.Second)); got != s {
		t.Fatalf("primary is %d after SIGCONT, want %d", got, s)
	}
	if log := c.RunLog(p); !strings.Contains(log, "left the role") {
		t.Error("the resumed node did not log that it left the role")
	}
	l.waitProgress(t, 100, raceSlack(20*time.Second))
	l.stopAndCheck(t, c.Client())

	recs := readStateTopic(t, k.Addr)
	newFirst := int64(-1)
	for _, r := range recs {
		if r.term > old.Term {
			newFirst = r.offset
			break
		}
	}
	if newFirst < 0 {
		t.Fatalf("no record of a term above %d in the state topic (%d records)", old.Term, len(recs))
	}
	for _, r := range recs {
		if r.offset > newFirst && r.term <= old.Term {
			t.Errorf("record at offset %d of term %d committed after the new holder's first record (offset %d)", r.offset, r.term, newFirst)
		}
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].term < recs[i-1].term {
			t.Errorf("term goes back at offset %d: %d after %d", recs[i].offset, recs[i].term, recs[i-1].term)
		}
	}
	t.Logf("state topic: %d committed records, old term %d, new holder's first record at offset %d", len(recs), old.Term, newFirst)
}

// TestKafkaHASimultaneousChallenges: three servers with stagger 0; kill the
// holder: both others challenge at once and exactly one ends PRIMARY.
func TestKafkaHASimultaneousChallenges(t *testing.T) {
	c, _ := kafkaHACluster(t, 3, 0)
	c.StartAll()
	p := c.WaitRoles(raceSlack(20 * time.Second))
	var rest []int
	for i := range 3 {
		if i != p {
			rest = append(rest, i)
		}
	}
	killed := time.Now()
	c.Kill(p)
	np, _, err := c.waitRolesAmong(raceSlack(15*time.Second), rest)
	if err != nil {
		t.Fatalf("roles after the kill: %v", err)
	}
	t.Logf("SIGKILL -> one PRIMARY (%s) after %v", c.nodes[np].ID, time.Since(killed).Round(time.Millisecond))
	// Stable: exactly one PRIMARY for a while (the loser learned it lost).
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for range 20 {
		<-tick.C
		if got, _, err := c.waitRolesAmong(time.Second, rest); err != nil || got != np {
			t.Fatalf("roles changed: primary %d (want %d): %v", got, np, err)
		}
	}
	challenges := 0
	for _, i := range rest {
		challenges += strings.Count(c.RunLog(i), "challenging for the role")
	}
	t.Logf("challenges after the kill: %d (both standbys at once with stagger 0)", challenges)
	if challenges < 1 {
		t.Error("no challenge was logged")
	}
}

// offsetsOf lists the state topic's last stable offset and high watermark.
func offsetsOf(ctx context.Context, cl *kgo.Client) (lso, hw int64, err error) {
	get := func(isolation int8) (int64, error) {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		req.IsolationLevel = isolation
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "xce.it.state"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
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
		return 0, fmt.Errorf("no offsets in the answer")
	}
	if lso, err = get(1); err != nil {
		return 0, 0, err
	}
	hw, err = get(0)
	return lso, hw, err
}
