package kvworker

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/worker"
)

// BenchmarkRestore is a warm-up's restore rate: a standby with an empty
// store reads a changelog of 100,000 records (1,000 keys) from an
// in-process broker until its lag is 0. It reports records/s.
func BenchmarkRestore(b *testing.B) {
	const n = 100_000
	brokers := broker(b)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(DefaultChangelogTopic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	for i := 0; i < n; i += 1000 {
		var recs []*kgo.Record
		for j := i; j < i+1000; j++ {
			recs = append(recs, &kgo.Record{Partition: 0, Key: []byte("k" + strconv.Itoa(j%1000)), Value: []byte(strconv.Itoa(j/1000 + 1))})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		h := handler(b, brokers, 500)
		caught := make(chan struct{})
		var once sync.Once
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			done <- h.Run(rctx, worker.Copy{Task: "input-0", Role: worker.Standby, Epoch: 1}, func(lag int64) {
				if lag == 0 {
					once.Do(func() { close(caught) })
				}
			})
		}()
		select {
		case <-caught:
		case <-time.After(time.Minute):
			b.Fatal("the standby did not catch up within a minute")
		}
		d := time.Since(start)
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(n)/d.Seconds(), "records/s")
	}
}
