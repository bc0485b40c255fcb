package bench

import (
	"os"
	"path/filepath"
	"slices"
	"time"
)

// FailoverAfter is the client-visible failover after a kill at t: the time
// to the first acknowledged submit that the kill affected (it was retried
// or began after the kill) and that returned after t.
func FailoverAfter(ops []Op, t time.Time) (time.Duration, bool) {
	var best time.Time
	for _, op := range ops {
		if op.Kind != Submit || op.Outcome != OK || !op.Return.After(t) {
			continue
		}
		if op.Retries == 0 && op.Call.Before(t) {
			continue
		}
		if best.IsZero() || op.Return.Before(best) {
			best = op.Return
		}
	}
	if best.IsZero() {
		return 0, false
	}
	return best.Sub(t), true
}

// FsyncLatency measures the median of n (4 KiB write + fdatasync) in dir:
// every acknowledged write waits for at least one such sync.
func FsyncLatency(dir string, n int) (time.Duration, error) {
	f, err := os.CreateTemp(dir, "fsync-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(filepath.Join(f.Name()))
	defer f.Close()
	buf := make([]byte, 4096)
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := f.WriteAt(buf, int64(i%64)*4096); err != nil {
			return 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, err
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	return lat[len(lat)/2], nil
}
