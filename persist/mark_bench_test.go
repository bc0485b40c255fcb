package persist

import (
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkStoreLogsMark measures what the durable mark costs appends:
// StoreLogs of one small entry per call, each its own fdatasync, with the
// Store raising the mark (a bolt commit every defaultMarkInterval while
// entries are appended) and without. Compare the writes/s of the two.
func BenchmarkStoreLogsMark(b *testing.B) {
	for _, c := range []struct {
		name  string
		every int // markInterval: 0 default, -1 never
	}{{"mark", 0}, {"no-mark", -1}} {
		b.Run(c.name, func(b *testing.B) {
			opts := testOpts
			opts.markInterval = defaultMarkInterval
			if c.every < 0 {
				opts.markInterval = -1
			}
			s, err := Open(b.TempDir(), opts)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.Stable.SetUint64([]byte("CurrentTerm"), 1); err != nil {
				b.Fatal(err)
			}
			data := make([]byte, 100)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := s.Logs.StoreLogs([]*raft.Log{{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data}}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
		})
	}
}
