package kvworker

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/worker"
)

// The handler's lags (worker.Lagger) keep a task whose copy stopped: its
// store's lag as it was, then, once the changelog has moved on and the end
// is looked up again, the records it is behind. A new handler on the same
// store directory (a restarted worker) reports the stores it finds.
func TestLagsOfIdleStores(t *testing.T) {
	brokers := broker(t)
	produceInput(t, brokers, 1, 0, 40)
	a := handler(t, brokers, 10)
	stop, _, _ := run(a, worker.Copy{Task: "input-1", Role: worker.Active, Epoch: 1}, nil)
	testutil.Eventually(t, 20*time.Second, "the active commits its input", func() bool {
		return committed(t, brokers, "input-1", 1) == 40
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := a.Lags(); !maps.Equal(got, map[string]int64{"input-1": 0}) {
		t.Fatalf("lags once the active stopped: %v, want input-1 at 0", got)
	}

	// Another worker's active moves the changelog on by 20 records.
	b := handler(t, brokers, 10)
	produceInput(t, brokers, 1, 40, 20)
	stopB, _, _ := run(b, worker.Copy{Task: "input-1", Role: worker.Active, Epoch: 2}, nil)
	testutil.Eventually(t, 20*time.Second, "the second active commits its input", func() bool {
		return committed(t, brokers, "input-1", 1) == 60
	})
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	a.refreshLags(context.Background(), adm)
	lag := a.Lags()["input-1"]
	if lag < 20 {
		t.Fatalf("lag of a's store after 20 more changelog records and their markers: %d", lag)
	}

	// A restarted worker on a's store directory finds the store.
	c, err := New(a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Lags(); len(got) != 0 {
		t.Fatalf("lags before the scan: %v", got)
	}
	c.scanStores(context.Background())
	c.firstLags(context.Background())
	if got := c.Lags(); got["input-1"] != lag || len(got) != 1 {
		t.Fatalf("restarted: lags %v, want input-1 at %d", got, lag)
	}
}
