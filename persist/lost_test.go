package persist

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/xce/xce/internal/testutil"
)

// Entries of lostEntry fill frames of exactly frameLen bytes, so a test
// knows where each starts: entry i at segHdr + (i-1)*frameLen.
const (
	segHdr   = 32
	frameLen = 64
)

func lostEntry(i uint64) *raft.Log {
	term := uint64(1)
	switch {
	case i > 20:
		term = 3
	case i > 10:
		term = 2
	}
	return &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: fmt.Appendf(nil, "entry-%013d", i)}
}

// nodeDir is a data dir as a node leaves it: current term 3, entries
// 1..last stored 4 at a time, optionally a snapshot, closed (so the mark is
// at last).
type nodeDir struct {
	last              uint64
	snapIndex, snapTm uint64 // 0: no snapshot
}

func (n nodeDir) build(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	s := openT(t, dir, testOpts)
	setTerm(t, s, 3)
	for i := uint64(1); i <= n.last; i += 4 {
		var logs []*raft.Log
		for j := i; j < i+4 && j <= n.last; j++ {
			logs = append(logs, lostEntry(j))
		}
		if err := s.Logs.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
	if n.snapIndex != 0 {
		storeSnapshot(t, s, n.snapIndex, n.snapTm)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// storeSnapshot stores a snapshot as raft writes one: with the cluster's
// configuration.
func storeSnapshot(t *testing.T, s *Store, index, term uint64) {
	t.Helper()
	conf := raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: "a"}}}
	_, trans := raft.NewInmemTransport("a")
	defer trans.Close()
	sink, err := s.Snaps.Create(raft.SnapshotVersionMax, index, term, conf, 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
}

func segPath(t *testing.T, dir string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, logDir, "*.log"))
	if len(m) != 1 {
		t.Fatalf("segments %v, want one", m)
	}
	return m[0]
}

func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

// setStable writes key (a uint64 when v is one, else bytes) into dir's
// raft.db directly.
func setStable(t *testing.T, dir, key string, v any) {
	t.Helper()
	b, err := raftboltdb.NewBoltStore(filepath.Join(dir, raftFile))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	switch v := v.(type) {
	case uint64:
		err = b.SetUint64([]byte(key), v)
	case []byte:
		err = b.Set([]byte(key), v)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func bufLogger(w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: w, Level: hclog.Debug})
}

// TestOpenRefusesLostState: each way a data dir can lose durable state is
// refused with one line naming the file, what is wrong and what to do;
// damage Open can repair (the tail of an unacknowledged write) is repaired
// and every acknowledged entry kept.
func TestOpenRefusesLostState(t *testing.T) {
	cases := []struct {
		name   string
		node   nodeDir
		damage func(t *testing.T, dir string)
		target error    // nil: opens
		what   []string // in the error ("SEG": the segment's path)
		last   uint64   // when it opens
		warn   string   // in the log, when it opens
	}{
		{name: "intact", node: nodeDir{last: 40}, last: 40},

		// The log's end is lost.
		{name: "segment deleted", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			os.Remove(segPath(t, dir))
		}, target: ErrLost, what: []string{logDir, "holds no segment, but entries up to 40"}},
		{name: "segment deleted, snapshot below the mark", node: nodeDir{last: 40, snapIndex: 30, snapTm: 3}, damage: func(t *testing.T, dir string) {
			os.Remove(segPath(t, dir))
		}, target: ErrLost, what: []string{"entries up to 40"}},
		{name: "segment deleted, snapshot covers the mark", node: nodeDir{last: 40, snapIndex: 40, snapTm: 3}, damage: func(t *testing.T, dir string) {
			os.Remove(segPath(t, dir))
		}, last: 0},
		{name: "cut to its header", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			truncate(t, segPath(t, dir), segHdr)
		}, target: ErrLost, what: []string{"SEG", "cut short after its header"}},
		{name: "cut at a frame boundary", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			truncate(t, segPath(t, dir), segHdr+30*frameLen)
		}, target: ErrLost, what: []string{"SEG", "cut short after entry 30"}},
		{name: "frames lost at full size", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			p := segPath(t, dir)
			b, _ := os.ReadFile(p)
			clear(b[segHdr+30*frameLen:])
			os.WriteFile(p, b, 0o640)
		}, target: ErrLost, what: []string{"SEG", "ends after entry 30, but entries up to 40"}},
		{name: "truncated to 0 bytes", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			truncate(t, segPath(t, dir), 0)
		}, target: ErrLost, what: []string{"SEG", "is 0 bytes"}},
		{name: "cut in half", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			truncate(t, segPath(t, dir), (segHdr+40*frameLen)/2+5)
		}, target: ErrLost, what: []string{"SEG", "cut short"}},

		// Damaged bytes.
		{name: "byte flipped in the last frame", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			p := segPath(t, dir)
			b, _ := os.ReadFile(p)
			b[segHdr+39*frameLen+40] ^= 0x20
			os.WriteFile(p, b, 0o640)
		}, target: ErrCorrupt, what: []string{"SEG", "entry 40", "entries up to 40 were durable"}},

		// The tail of a write after the mark: repaired.
		{name: "torn write after the last frame", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			p := segPath(t, dir)
			b, _ := os.ReadFile(p)
			partial := make([]byte, 40) // a frame header and part of a body
			copy(partial, lostEntry(41).Data)
			partial[0] = 33
			copy(b[segHdr+40*frameLen:], partial)
			os.WriteFile(p, b, 0o640)
		}, last: 40, warn: "after entry 40 at the end of SEG: the tail of a write a crash interrupted, or damage to entries after the durable mark 40"},

		// raft.db lost or older than the log.
		{name: "raft.db missing", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, raftFile))
		}, target: ErrLost, what: []string{raftFile + " is missing", logDir, "vote twice"}},
		{name: "raft.db missing, snapshot only", node: nodeDir{last: 40, snapIndex: 40, snapTm: 3}, damage: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, raftFile))
			os.Remove(segPath(t, dir))
		}, target: ErrLost, what: []string{raftFile + " is missing", snapDir}},
		{name: "raft.db empty", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			truncate(t, filepath.Join(dir, raftFile), 0)
		}, target: ErrLost, what: []string{raftFile + " is empty"}},
		{name: "raft.db without a term", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, raftFile))
			b, err := raftboltdb.NewBoltStore(filepath.Join(dir, raftFile))
			if err != nil {
				t.Fatal(err)
			}
			b.Close()
		}, target: ErrLost, what: []string{raftFile + " holds no current term", "entry 40"}},
		{name: "raft.db older than the log", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			setStable(t, dir, "CurrentTerm", uint64(2))
		}, target: ErrLost, what: []string{raftFile + " holds current term 2", "entry 40 of term 3", "vote twice"}},
		{name: "raft.db older than the snapshot", node: nodeDir{last: 40, snapIndex: 40, snapTm: 5}, target: ErrLost,
			what: []string{raftFile + " holds current term 3", "snapshot", "of term 5"}},
		{name: "raft-log missing", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			os.RemoveAll(filepath.Join(dir, logDir))
		}, target: ErrLost, what: []string{logDir + " is missing", "current term 3"}},

		// Terms that would wrap.
		{name: "current term at MaxTerm", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			setStable(t, dir, "CurrentTerm", raft.MaxTerm)
		}, target: ErrCorrupt, what: []string{raftFile, "CurrentTerm is 4611686018427387904, not a valid term"}},
		{name: "current term 2^64-1", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			setStable(t, dir, "CurrentTerm", uint64(math.MaxUint64))
		}, target: ErrCorrupt, what: []string{"CurrentTerm is 18446744073709551615"}},
		{name: "vote term at MaxTerm", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			setStable(t, dir, "LastVoteTerm", raft.MaxTerm)
		}, target: ErrCorrupt, what: []string{"LastVoteTerm"}},
		{name: "current term just below MaxTerm", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			setStable(t, dir, "CurrentTerm", raft.MaxTerm-1)
		}, last: 40},
		{name: "mark damaged", node: nodeDir{last: 40}, damage: func(t *testing.T, dir string) {
			setStable(t, dir, markKey, []byte("xx"))
		}, target: ErrCorrupt, what: []string{markKey}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := c.node.build(t)
			if c.damage != nil {
				c.damage(t, dir)
			}
			var what []string
			for _, w := range c.what {
				if w == "SEG" {
					w = filepath.Join(dir, logDir, "00000000000000000001.log")
				}
				what = append(what, w)
			}
			_, dbErr := os.Stat(filepath.Join(dir, raftFile))
			if c.target != nil {
				err := mustFailErr(t, dir, testOpts, c.target, what...)
				if strings.Contains(err.Error(), "\n") || !strings.HasSuffix(err.Error(), "; "+lostAdvice) {
					t.Fatalf("error is not one line ending with what to do: %q", err)
				}
				if _, err := os.Stat(filepath.Join(dir, raftFile)); errors.Is(dbErr, fs.ErrNotExist) && !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("the refused Open created %s", raftFile)
				}
				return
			}
			logs := &testutil.SyncBuffer{}
			opts := testOpts
			opts.Logger = bufLogger(logs)
			s := openT(t, dir, opts)
			defer s.Close()
			first, _ := s.Logs.FirstIndex()
			last, _ := s.Logs.LastIndex()
			if last != c.last || (last != 0 && first != 1) {
				t.Fatalf("log %d..%d, want 1..%d", first, last, c.last)
			}
			for i := uint64(1); i <= last; i++ {
				var l raft.Log
				if err := s.Logs.GetLog(i, &l); err != nil || !bytes.Equal(l.Data, lostEntry(i).Data) {
					t.Fatalf("entry %d: %+v, %v", i, l, err)
				}
			}
			warn := strings.ReplaceAll(c.warn, "SEG", filepath.Join(dir, logDir, "00000000000000000001.log"))
			if got := logs.String(); (warn == "") != !strings.Contains(got, "raft log:") || !strings.Contains(got, warn) {
				t.Fatalf("log %q, want %q", got, warn)
			}
		})
	}
}

// mustFailErr is mustFail, returning the error.
func mustFailErr(t *testing.T, dir string, opts Options, target error, mentions ...string) error {
	t.Helper()
	mustFail(t, dir, opts, target, mentions...)
	_, err := Open(dir, opts)
	return err
}

// TestMiddleSegmentMissing: with small segments, a segment deleted
// between two others is refused, naming both sides of the gap.
func TestMiddleSegmentMissing(t *testing.T) {
	dir := t.TempDir()
	opts := testOpts
	opts.SegmentSize = 1024
	s := openT(t, dir, opts)
	setTerm(t, s, 3)
	for i := uint64(1); i <= 100; i++ {
		if err := s.Logs.StoreLog(lostEntry(i)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	m, _ := filepath.Glob(filepath.Join(dir, logDir, "*.log"))
	if len(m) < 4 {
		t.Fatalf("%d segments, want several", len(m))
	}
	if err := os.Remove(m[2]); err != nil {
		t.Fatal(err)
	}
	mustFail(t, dir, opts, ErrLost, m[1], m[3], "the entries between are missing")
}

// TestFreshDirWithoutLog: a dir where only the meta file was written (a
// crash during the first start) still starts.
func TestFreshDirWithoutLog(t *testing.T) {
	dir := t.TempDir()
	if err := writeFileSync(filepath.Join(dir, metaFile), meta{Format: metaFormat, Version: metaVersion, NodeID: "n1", ClusterID: "c1"}); err != nil {
		t.Fatal(err)
	}
	s := openT(t, dir, testOpts)
	defer s.Close()
	if has, err := s.HasState(); err != nil || has {
		t.Fatalf("HasState = %v, %v", has, err)
	}
}

// TestKafkaSnapshotsAreNotRaftState: the kafka backend keeps snapshots
// with no raft configuration and never writes a term; its dir opens.
func TestKafkaSnapshotsAreNotRaftState(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, testOpts)
	sink, err := s.Snaps.Create(raft.SnapshotVersionMax, 500, 7, raft.Configuration{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink.Write([]byte("state"))
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	openT(t, dir, testOpts).Close()
}

func readMark(t *testing.T, s *Store) mark {
	t.Helper()
	v, err := s.Stable.Get([]byte(markKey))
	if errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return mark{}
	}
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeMark(v)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMarkRaisedAfterAppends(t *testing.T) {
	opts := testOpts
	opts.markInterval = 5 * time.Millisecond
	s := openT(t, t.TempDir(), opts)
	defer s.Close()
	setTerm(t, s, 3)
	for i := uint64(1); i <= 10; i++ {
		if err := s.Logs.StoreLog(lostEntry(i)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 5*time.Second, "mark at 10", func() bool { return readMark(t, s) == mark{durable: 10} })
}

func TestCloseWritesTheMark(t *testing.T) {
	dir := t.TempDir()
	opts := testOpts
	opts.markInterval = time.Hour
	s := openT(t, dir, opts)
	setTerm(t, s, 3)
	if err := s.Logs.StoreLogs([]*raft.Log{lostEntry(1), lostEntry(2), lostEntry(3)}); err != nil {
		t.Fatal(err)
	}
	if m := readMark(t, s); m != (mark{}) {
		t.Fatalf("mark %+v before an hour passed", m)
	}
	s.Close()
	s = openT(t, dir, opts)
	defer s.Close()
	if m := readMark(t, s); m != (mark{durable: 3}) {
		t.Fatalf("mark after Close %+v, want 3", m)
	}
}

func checkEntries(t *testing.T, s *Store, last uint64) {
	t.Helper()
	if l, _ := s.Logs.LastIndex(); l != last {
		t.Fatalf("last index %d, want %d", l, last)
	}
	for i := uint64(1); i <= last; i++ {
		var l raft.Log
		if err := s.Logs.GetLog(i, &l); err != nil || l.Term != lostEntry(i).Term && i <= 40 {
			t.Fatalf("entry %d: %+v, %v", i, l, err)
		}
	}
}

// TestMarkLoweredBeforeSuffixDelete: raft deletes a suffix a new leader
// overrides. The mark goes down first, durably, so a crash at any point of
// the delete leaves a dir that opens.
func TestMarkLoweredBeforeSuffixDelete(t *testing.T) {
	dir := nodeDir{last: 50}.build(t)
	s := openT(t, dir, testOpts)
	defer s.Close()
	if m := readMark(t, s); m != (mark{durable: 50}) {
		t.Fatalf("mark %+v, want 50", m)
	}

	// A crash after the mark went down, before any frame was touched.
	s.markMu.Lock()
	err := s.writeMark(mark{durable: 40, cutFrom: 41})
	s.markMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	c := testutil.CopyDir(t, dir)
	cs := openT(t, c, testOpts)
	checkEntries(t, cs, 50)
	cs.Close()

	// A crash while the frames were zeroed: the disk kept some zeros and
	// not others, with intact frames of later writes after them.
	c = testutil.CopyDir(t, dir)
	p := segPath(t, c)
	b, _ := os.ReadFile(p)
	clear(b[segHdr+40*frameLen : segHdr+44*frameLen]) // 41..44, a batch of its own
	os.WriteFile(p, b, 0o640)
	logs := &testutil.SyncBuffer{}
	opts := testOpts
	opts.Logger = bufLogger(logs)
	cs = openT(t, c, opts)
	checkEntries(t, cs, 40)
	cs.Close()
	if !strings.Contains(logs.String(), "finished deleting entries after 40 that a crash interrupted") {
		t.Fatalf("log: %s", logs)
	}

	// The delete itself.
	if err := s.Logs.DeleteRange(41, 50); err != nil {
		t.Fatal(err)
	}
	if m := readMark(t, s); m != (mark{durable: 40, cutFrom: 41}) {
		t.Fatalf("mark after the delete %+v", m)
	}
	cs = openT(t, testutil.CopyDir(t, dir), testOpts)
	checkEntries(t, cs, 40)
	cs.Close()

	// The new leader's entries; the mark goes up again and forgets the cut.
	setTerm(t, s, 4)
	for i := uint64(41); i <= 45; i++ {
		if err := s.Logs.StoreLog(&raft.Log{Index: i, Term: 4, Data: []byte("new")}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s = openT(t, dir, testOpts)
	if m := readMark(t, s); m != (mark{durable: 45}) {
		t.Fatalf("mark %+v, want 45", m)
	}
	checkEntries(t, s, 45)
}

// TestMarkLoweredBeforeDeleteAll: raft clears the log after installing a
// snapshot; the mark goes to zero first, and the log goes on past the
// snapshot.
func TestMarkLoweredBeforeDeleteAll(t *testing.T) {
	dir := nodeDir{last: 30}.build(t)
	s := openT(t, dir, testOpts)
	storeSnapshot(t, s, 100, 3)
	if err := s.Logs.DeleteRange(1, 30); err != nil {
		t.Fatal(err)
	}
	if m := readMark(t, s); m != (mark{}) {
		t.Fatalf("mark after deleting everything %+v", m)
	}
	cs := openT(t, testutil.CopyDir(t, dir), testOpts)
	if l, _ := cs.Logs.LastIndex(); l != 0 {
		t.Fatalf("last index %d", l)
	}
	cs.Close()
	if err := s.Logs.StoreLogs([]*raft.Log{{Index: 101, Term: 3}, {Index: 102, Term: 3}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openT(t, dir, testOpts)
	defer s.Close()
	if f, _ := s.Logs.FirstIndex(); f != 101 {
		t.Fatalf("first index %d", f)
	}
	if m := readMark(t, s); m != (mark{durable: 102}) {
		t.Fatalf("mark %+v", m)
	}
}
