package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xce/xce/client"
)

// NodeStats is one node's size: its task count (Status), its Go heap,
// resident memory, longest recent GC pause and last raft snapshot's cost
// (its /metrics), and, for a local cluster, the bytes of its data dir.
type NodeStats struct {
	ID             string `json:"id"`
	Tasks          uint64 `json:"tasks"`
	HeapInuseBytes uint64 `json:"heap_inuse_bytes"`
	HeapAllocBytes uint64 `json:"heap_alloc_bytes"`
	// HeapLiveBytes is the heap the last collection found live: the
	// state's size, without garbage (0 from a node that does not say).
	HeapLiveBytes     uint64  `json:"heap_live_bytes"`
	RSSBytes          uint64  `json:"rss_bytes"`
	DataDirBytes      int64   `json:"data_dir_bytes,omitempty"`
	GCPauseMaxSeconds float64 `json:"gc_pause_max_seconds"`
	// The last raft snapshot this node took: how long it held the state
	// machine (applies wait meanwhile), how long writing it out took, its
	// bytes; and how many it took since it started.
	SnapshotCaptureSeconds float64 `json:"snapshot_capture_seconds"`
	SnapshotPersistSeconds float64 `json:"snapshot_persist_seconds"`
	SnapshotBytes          uint64  `json:"snapshot_bytes"`
	Snapshots              uint64  `json:"snapshots"`
	// Error says what could not be read; the other fields hold what could.
	Error string `json:"error,omitempty"`
}

// memMetrics are the figures NodeStats takes from a node's /metrics.
type memMetrics struct {
	HeapInuse, HeapAlloc, HeapLive, RSS uint64
	// StackInuse and Goroutines: the goroutines' stacks and number.
	StackInuse, Goroutines uint64
	GCPauseMax             float64
	// The snapshot figures are zero on a node that took none (or that
	// does not export them).
	SnapshotCapture, SnapshotPersist float64
	SnapshotBytes, Snapshots         uint64
}

// parseMemMetrics reads the Prometheus text exposition format for the Go
// collector's heap figures, the process collector's resident memory and the
// GC pause summary, and xce's snapshot metrics. The pause is the summary's quantile="1" (the longest of
// the pauses it keeps) or, without that quantile, the largest exposed.
// Metrics it does not know are skipped; it fails only when none of the heap
// and memory figures is there.
func parseMemMetrics(r io.Reader) (memMetrics, error) {
	var m memMetrics
	found := 0
	pauseMax, pauseAny := math.NaN(), math.NaN()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, ok := splitSample(line)
		if !ok {
			continue
		}
		switch name {
		case "go_memstats_heap_inuse_bytes":
			m.HeapInuse, found = uint64(value), found+1
		case "go_memstats_heap_alloc_bytes":
			m.HeapAlloc, found = uint64(value), found+1
		case "go_gc_heap_live_bytes":
			m.HeapLive = uint64(value)
		case "go_memstats_stack_inuse_bytes":
			m.StackInuse = uint64(value)
		case "go_goroutines":
			m.Goroutines = uint64(value)
		case "process_resident_memory_bytes":
			m.RSS, found = uint64(value), found+1
		case "xce_snapshot_capture_seconds":
			m.SnapshotCapture = value
		case "xce_snapshot_persist_seconds":
			m.SnapshotPersist = value
		case "xce_snapshot_bytes":
			m.SnapshotBytes = uint64(value)
		case "xce_snapshots_total":
			m.Snapshots = uint64(value)
		case "go_gc_duration_seconds":
			if math.IsNaN(value) {
				continue
			}
			if strings.Contains(labels, `quantile="1"`) {
				pauseMax = value
			}
			if math.IsNaN(pauseAny) || value > pauseAny {
				pauseAny = value
			}
		}
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if found == 0 {
		return m, errors.New("no go_memstats_heap_inuse_bytes, go_memstats_heap_alloc_bytes or process_resident_memory_bytes in /metrics")
	}
	switch {
	case !math.IsNaN(pauseMax):
		m.GCPauseMax = pauseMax
	case !math.IsNaN(pauseAny):
		m.GCPauseMax = pauseAny
	}
	return m, nil
}

// splitSample splits a sample line: name, the label set between braces
// (raw, "" without), and the value (a timestamp after it is ignored).
func splitSample(line string) (name, labels string, value float64, ok bool) {
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return "", "", 0, false
	}
	name, rest := line[:i], line[i:]
	if rest[0] == '{' {
		// Find the closing brace outside quoted label values.
		inQuote, end := false, -1
		for j := 1; j < len(rest) && end < 0; j++ {
			switch rest[j] {
			case '\\':
				j++
			case '"':
				inQuote = !inQuote
			case '}':
				if !inQuote {
					end = j
				}
			}
		}
		if end < 0 {
			return "", "", 0, false
		}
		labels, rest = rest[1:end], rest[end+1:]
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", "", 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", "", 0, false
	}
	return name, labels, v, true
}

// dirBytes is the size of the regular files under dir.
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			// A file removed during the walk (a compaction) is not an error.
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n, err
}

// scraper reads the nodes' sizes with the run's credentials: /metrics
// needs the token where permissions are enforced.
type scraper struct {
	http   *http.Client
	scheme string
	token  string
	cl     *client.Client
}

func newScraper(tlsCfg *tls.Config, creds client.Credentials, cl *client.Client) *scraper {
	s := &scraper{http: client.NewHTTPClient(tlsCfg), scheme: "http", token: creds.Token, cl: cl}
	if tlsCfg != nil {
		s.scheme = "https"
	}
	return s
}

func (s *scraper) close() { s.http.CloseIdleConnections() }

// metrics fetches and parses one node's /metrics.
func (s *scraper) metrics(ctx context.Context, ep string) (memMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.scheme+"://"+ep+"/metrics", nil)
	if err != nil {
		return memMetrics{}, err
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return memMetrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return memMetrics{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseMemMetrics(resp.Body)
}

// nodes reads every endpoint's size; dataDirs, when not nil, are the local
// nodes' data dirs by endpoint index.
func (s *scraper) nodes(ctx context.Context, endpoints, dataDirs []string) []NodeStats {
	out := make([]NodeStats, 0, len(endpoints))
	for i, ep := range endpoints {
		ns := NodeStats{ID: ep}
		var errs []string
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if st, err := s.cl.Status(sctx, ep); err != nil {
			errs = append(errs, fmt.Sprintf("status: %v", err))
		} else {
			ns.ID, ns.Tasks = st.GetNodeId(), st.GetTasks()
		}
		if m, err := s.metrics(sctx, ep); err != nil {
			errs = append(errs, fmt.Sprintf("metrics: %v", err))
		} else {
			ns.HeapInuseBytes, ns.HeapAllocBytes, ns.RSSBytes, ns.GCPauseMaxSeconds = m.HeapInuse, m.HeapAlloc, m.RSS, m.GCPauseMax
			ns.HeapLiveBytes = m.HeapLive
			ns.SnapshotCaptureSeconds, ns.SnapshotPersistSeconds, ns.SnapshotBytes, ns.Snapshots = m.SnapshotCapture, m.SnapshotPersist, m.SnapshotBytes, m.Snapshots
		}
		cancel()
		if i < len(dataDirs) {
			if n, err := dirBytes(dataDirs[i]); err != nil {
				errs = append(errs, fmt.Sprintf("data dir: %v", err))
			} else {
				ns.DataDirBytes = n
			}
		}
		ns.Error = strings.Join(errs, "; ")
		out = append(out, ns)
	}
	return out
}

// PrintNodes writes a line per node.
func PrintNodes(w io.Writer, nodes []NodeStats) {
	for _, n := range nodes {
		fmt.Fprintf(w, "node %-4s tasks %d  heap inuse %.1f MiB  alloc %.1f MiB  live %.1f MiB  rss %.1f MiB  gc pause max %.2f ms",
			n.ID, n.Tasks, mib(n.HeapInuseBytes), mib(n.HeapAllocBytes), mib(n.HeapLiveBytes), mib(n.RSSBytes), n.GCPauseMaxSeconds*1000)
		if n.DataDirBytes > 0 {
			fmt.Fprintf(w, "  data dir %.1f MiB", mib(uint64(n.DataDirBytes)))
		}
		if n.Snapshots > 0 {
			fmt.Fprintf(w, "  snapshots %d, last %.1f MiB: capture %.2f ms, persist %.1f ms",
				n.Snapshots, mib(n.SnapshotBytes), n.SnapshotCaptureSeconds*1000, n.SnapshotPersistSeconds*1000)
		}
		if n.Error != "" {
			fmt.Fprintf(w, "  (%s)", n.Error)
		}
		fmt.Fprintln(w)
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// PrintSnapshot writes a line for the snapshot taken during the run.
func PrintSnapshot(w io.Writer, s *SnapshotResult) {
	if s == nil {
		return
	}
	if s.Error != "" {
		fmt.Fprintf(w, "snapshot at %.1fs: %s\n", s.AtSeconds, s.Error)
		return
	}
	fmt.Fprintf(w, "snapshot at %.1fs: index %d, %.1f MiB in %.3fs; max write latency around it %.2f ms (run %.2f ms)\n",
		s.AtSeconds, s.Index, mib(s.Bytes), s.TookSeconds, s.MaxLatencyMsAround, s.MaxLatencyMsRun)
}

// PrintRestarts writes the restart measurements and the nodes' sizes
// after the cold restart.
func PrintRestarts(w io.Writer, r *Restarts) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "restarts: follower caught up %.3fs after it listened (%d entries behind); cold restart to first write %.3fs",
		r.FollowerCatchupSeconds, r.FollowerBehindEntries, r.ColdRestartSeconds)
	if len(r.FollowerCatchupRuns) > 1 {
		fmt.Fprintf(w, " (medians of %d rounds: follower %s; cold %s)", len(r.FollowerCatchupRuns), seconds(r.FollowerCatchupRuns), seconds(r.ColdRestartRuns))
	}
	if len(r.ColdRestartReadySeconds) > 0 {
		ids := slices.Sorted(maps.Keys(r.ColdRestartReadySeconds))
		fmt.Fprint(w, ", ready")
		for _, id := range ids {
			fmt.Fprintf(w, " %s %.3fs", id, r.ColdRestartReadySeconds[id])
		}
	}
	fmt.Fprintf(w, "; tasks %d acknowledged, %d after", r.TasksAcked, r.TasksAfter)
	if r.TransparentHugePages != "" {
		fmt.Fprintf(w, "; transparent huge pages %s", r.TransparentHugePages)
	}
	fmt.Fprintln(w)
	PrintNodes(w, r.NodeStats)
}

// seconds lists figures in seconds, separated by slashes.
func seconds(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.3f", x)
	}
	return strings.Join(parts, "/")
}
