package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseMemMetrics(t *testing.T) {
	const full = `# HELP go_gc_duration_seconds A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0"} 2.1e-05
go_gc_duration_seconds{quantile="0.25"} 3.4e-05
go_gc_duration_seconds{quantile="0.5"} 5e-05
go_gc_duration_seconds{quantile="0.75"} 0.0001
go_gc_duration_seconds{quantile="1"} 0.0125
go_gc_duration_seconds_sum 0.5
go_gc_duration_seconds_count 40
# TYPE go_memstats_heap_inuse_bytes gauge
go_memstats_heap_inuse_bytes 1.7694720e+07
go_memstats_heap_alloc_bytes 15540760
go_gc_heap_live_bytes 1.2e+07
go_memstats_stack_inuse_bytes 983040
go_goroutines 57
process_resident_memory_bytes 4.5072384e+07
xce_applied_index 12
`
	for _, tc := range []struct {
		name, text string
		want       memMetrics
		err        string
	}{
		{name: "go and process collectors", text: full,
			want: memMetrics{HeapInuse: 17694720, HeapAlloc: 15540760, HeapLive: 12000000, RSS: 45072384, GCPauseMax: 0.0125,
				StackInuse: 983040, Goroutines: 57}},
		{name: "without quantile 1 the largest exposed pause",
			text: "go_gc_duration_seconds{quantile=\"0.5\"} 0.002\ngo_gc_duration_seconds{quantile=\"0.75\"} 0.003\ngo_gc_duration_seconds{quantile=\"0\"} 0.001\nprocess_resident_memory_bytes 100\n",
			want: memMetrics{RSS: 100, GCPauseMax: 0.003}},
		{name: "NaN quantiles of no GC yet",
			text: "go_gc_duration_seconds{quantile=\"1\"} NaN\ngo_memstats_heap_inuse_bytes 5\n",
			want: memMetrics{HeapInuse: 5}},
		{name: "other labels, a brace in a quoted value, a timestamp",
			text: "go_gc_duration_seconds{job=\"x}\",quantile=\"1\"} 0.25 1700000000000\ngo_memstats_heap_alloc_bytes{instance=\"a\"} 7\n",
			want: memMetrics{HeapAlloc: 7, GCPauseMax: 0.25}},
		{name: "a name that only starts like a known one is skipped",
			text: "go_memstats_heap_inuse_bytes_total 9\nprocess_resident_memory_bytes 3\n",
			want: memMetrics{RSS: 3}},
		{name: "malformed lines are skipped",
			text: "go_memstats_heap_inuse_bytes\ngo_memstats_heap_inuse_bytes{quantile=\"1\" 4\ngo_memstats_heap_inuse_bytes x\nprocess_resident_memory_bytes 8\n",
			want: memMetrics{RSS: 8}},
		{name: "snapshot figures",
			text: "xce_snapshot_capture_seconds 0.004\nxce_snapshot_persist_seconds 0.25\nxce_snapshot_bytes 1.048576e+06\nxce_snapshots_total 3\nprocess_resident_memory_bytes 8\n",
			want: memMetrics{RSS: 8, SnapshotCapture: 0.004, SnapshotPersist: 0.25, SnapshotBytes: 1 << 20, Snapshots: 3}},
		{name: "snapshot figures alone are not enough",
			text: "xce_snapshots_total 3\n", err: "no go_memstats_heap_inuse_bytes"},
		{name: "none of the memory figures", text: "# only comments\nxce_applied_index 3\n", err: "no go_memstats_heap_inuse_bytes"},
		{name: "empty", text: "", err: "no go_memstats_heap_inuse_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMemMetrics(strings.NewReader(tc.text))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// dirBytes sums the regular files at every depth.
func TestDirBytes(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for p, n := range map[string]int{"f": 10, "a/g": 100, "a/b/h": 1000} {
		if err := os.WriteFile(filepath.Join(dir, p), make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := dirBytes(dir); err != nil || got != 1110 {
		t.Errorf("dirBytes = %d, %v; want 1110", got, err)
	}
	if _, err := dirBytes(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("a missing dir: %v, want 0 bytes and no error", err)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{3, 1}, 2}, {[]float64{0.5, 0.1, 0.9}, 0.5}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}
