package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/testutil"
)

// TestDataDirDamage runs one node, writes tasks through it, stops it, and
// then starts it on copies of its data dir, each damaged in one way a disk
// or an operator can damage it. Each copy either starts with every
// acknowledged task or refuses to start with one line naming the file;
// none starts with fewer tasks, and none hangs.
//
// (A segment missing between two others needs more than one segment, which
// a node only writes after 16 MiB of log; the persist unit tests cover it.)
func TestDataDirDamage(t *testing.T) {
	// A snapshot partway, so a log that lost its end could fall back on
	// it, as in the reports this test comes from. Exactly one: the first
	// comes after 50 of the ~62 entries of the first 60 tasks, and a second
	// would need 50 more, so the last 20 tasks stay after it.
	c := newCluster(t, 1, WithLogLevel("info"),
		WithConfig(func(cfg *configs.Config) {
			cfg.Raft.SnapshotInterval = configs.Duration{Duration: 50 * time.Millisecond}
			cfg.Raft.SnapshotThreshold, cfg.Raft.TrailingLogs = 50, 8
		}))
	c.Start(0)
	c.WaitRoles(raceSlack(15 * time.Second))
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), raceSlack(60*time.Second))
	defer cancel()
	var tasks []string
	submit := func(n int) {
		t.Helper()
		for range n {
			id := fmt.Sprintf("task-%03d", len(tasks))
			if _, err := cl.Submit(ctx, client.Task{ID: id}); err != nil {
				t.Fatalf("submit %s: %v", id, err)
			}
			tasks = append(tasks, id)
		}
	}
	submit(60)
	snaps := filepath.Join(c.Node(0).DataDir, "snapshots")
	if err := testutil.Poll(raceSlack(10*time.Second), pollEvery, func() error {
		// raft's file snapshot store keeps them in a snapshots dir of its own.
		if m, _ := filepath.Glob(filepath.Join(snaps, "snapshots", "*", "meta.json")); len(m) == 0 {
			return fmt.Errorf("no snapshot in %s", snaps)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	submit(20) // past the snapshot, fewer than its threshold
	if code := c.Stop(0); code != 0 {
		t.Fatalf("stop: exit %d", code)
	}
	pristine := c.Node(0).DataDir
	seg := onlySegment(t, pristine)
	frames := segmentFrames(t, filepath.Join(pristine, "raft-log", seg))
	if len(frames) < len(tasks) {
		t.Fatalf("%d frames for %d tasks", len(frames), len(tasks))
	}
	lastFrame, end := frames[len(frames)-1], frames[len(frames)-1].end

	type damage struct {
		name   string
		apply  func(t *testing.T, dir string)
		file   string // the file a refusal names, relative to the dir
		starts bool   // a torn write: it must start
	}
	segRel := filepath.Join("raft-log", seg)
	segFile := func(dir string) string { return filepath.Join(dir, segRel) }
	rewrite := func(t *testing.T, path string, f func(b []byte) []byte) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, f(b), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	damages := []damage{
		{name: "none", starts: true},
		{name: "last segment cut at a frame boundary", file: segRel, apply: func(t *testing.T, dir string) {
			rewrite(t, segFile(dir), func(b []byte) []byte { return b[:lastFrame.off] })
		}},
		{name: "last frames lost, segment at full size", file: segRel, apply: func(t *testing.T, dir string) {
			rewrite(t, segFile(dir), func(b []byte) []byte { clear(b[frames[len(frames)-5].off:end]); return b })
		}},
		{name: "last segment cut to its header", file: segRel, apply: func(t *testing.T, dir string) {
			rewrite(t, segFile(dir), func(b []byte) []byte { return b[:frames[0].off] })
		}},
		{name: "last segment truncated to 0 bytes", file: segRel, apply: func(t *testing.T, dir string) {
			rewrite(t, segFile(dir), func(b []byte) []byte { return nil })
		}},
		{name: "last segment deleted", file: "raft-log", apply: func(t *testing.T, dir string) {
			if err := os.Remove(segFile(dir)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "last segment cut in half", file: segRel, apply: func(t *testing.T, dir string) {
			rewrite(t, segFile(dir), func(b []byte) []byte { return b[:end/2] })
		}},
		{name: "byte flipped in the last frame", file: segRel, apply: func(t *testing.T, dir string) {
			rewrite(t, segFile(dir), func(b []byte) []byte { b[lastFrame.off+40] ^= 0x08; return b })
		}},
		{name: "raft.db missing", file: "raft.db", apply: func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "raft.db")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "raft.db empty", file: "raft.db", apply: func(t *testing.T, dir string) {
			rewrite(t, filepath.Join(dir, "raft.db"), func(b []byte) []byte { return nil })
		}},
		// The tail of a write a crash cut short, after everything
		// acknowledged: repaired at start.
		{name: "garbage after the last frame", starts: true, apply: func(t *testing.T, dir string) {
			rewrite(t, segFile(dir), func(b []byte) []byte {
				copy(b[end:], "\x29\x00\x00\x00 torn write: not a frame, and no zeros either")
				return b
			})
		}},
		{name: "partial frame after the last frame", starts: true, apply: func(t *testing.T, dir string) {
			rewrite(t, segFile(dir), func(b []byte) []byte {
				// The next entry's frame, as far as the disk took it:
				// the last frame's bytes with the next index, cut short.
				f := append([]byte(nil), b[lastFrame.off:end]...)
				binary.LittleEndian.PutUint64(f[8:], lastFrame.index+1)
				copy(b[end:], f[:len(f)/2])
				return b
			})
		}},
	}
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			dir := testutil.CopyDir(t, pristine)
			if d.apply != nil {
				d.apply(t, dir)
			}
			spec := c.ConfigSpec(0)
			spec.DataDir = dir
			if err := os.WriteFile(c.Node(0).ConfigPath, []byte(spec.YAML()), 0o644); err != nil {
				t.Fatal(err)
			}
			c.Start(0)
			started := false
			if err := testutil.Poll(raceSlack(15*time.Second), pollEvery, func() error {
				if !c.Running(0) {
					return nil
				}
				if s, err := c.Status(0); err == nil && s.Role.String() == "ROLE_PRIMARY" && s.WriteQuorum {
					started = true
					return nil
				}
				return fmt.Errorf("neither PRIMARY nor exited")
			}); err != nil {
				t.Fatalf("the node hangs: %v\n%s", err, c.RunLog(0))
			}
			if !started {
				code := c.Wait(0)
				lines := refusalLines(c.RunLog(0))
				want := filepath.Join(dir, d.file)
				switch {
				case d.starts:
					t.Fatalf("refused to start (exit %d) after a torn write: %q", code, lines)
				case code == 0:
					t.Fatalf("exited 0 without starting: %q", lines)
				case len(lines) != 1 || !strings.Contains(lines[0], want) || !strings.Contains(lines[0], "docs/operations.md"):
					t.Fatalf("refusal (exit %d): %q; want one line naming %s and what to do", code, lines, want)
				}
				t.Logf("refused: %s", lines[0])
				return
			}
			got, err := c.ClientOf(c.Node(0).ClientAddr).List(ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, tk := range got {
				ids = append(ids, tk.TaskId)
			}
			sort.Strings(ids)
			if strings.Join(ids, ",") != strings.Join(tasks, ",") {
				t.Fatalf("started with %d tasks, want all %d acknowledged", len(ids), len(tasks))
			}
			if !d.starts {
				t.Logf("started with all %d tasks", len(ids))
			}
			if d.starts && d.apply != nil && !strings.Contains(c.RunLog(0), "the tail of a write a crash interrupted, or damage to entries after the durable mark") {
				t.Fatalf("no warning about the repaired tail:\n%s", c.RunLog(0))
			}
			if d.name != "none" && !d.starts {
				t.Fatalf("started on lost state")
			}
			if code := c.Stop(0); code != 0 {
				t.Fatalf("stop: exit %d", code)
			}
		})
	}
}

// refusalLines are the lines the xce command printed for its error.
func refusalLines(log string) []string {
	var out []string
	for _, l := range nonEmptyLines(log) {
		if strings.HasPrefix(l, "xce: ") {
			out = append(out, l)
		}
	}
	return out
}

func onlySegment(t *testing.T, dir string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "raft-log", "*.log"))
	if err != nil || len(m) != 1 {
		t.Fatalf("segments in %s: %v, %v; want one", dir, m, err)
	}
	return filepath.Base(m[0])
}

type frame struct {
	off, end int64
	index    uint64
}

// segmentFrames lists the frames of a segment file (layout: persist/raftlog).
func segmentFrames(t *testing.T, path string) []frame {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 32 || string(b[:8]) != "xcelog02" {
		t.Fatalf("%s: not a segment this test knows", path)
	}
	le := binary.LittleEndian
	var out []frame
	for off := int64(32); off+32 <= int64(len(b)); {
		n := int64(le.Uint32(b[off:]))
		if n == 0 {
			break
		}
		end := off + (32+n+7)&^7
		out = append(out, frame{off: off, end: end, index: le.Uint64(b[off+8:])})
		off = end
	}
	return out
}
