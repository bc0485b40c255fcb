package persist

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

func v1Entry(i uint64) *raft.Log {
	return &raft.Log{Index: i, Term: 1 + i/100, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("task-%d", i))}
}

// makeV1Dir builds a data dir as layout version 1 left it: the meta file
// at version 1 and the log (first..last) and stable store both in raft.db.
func makeV1Dir(t *testing.T, first, last uint64) string {
	t.Helper()
	dir := t.TempDir()
	m := meta{Format: metaFormat, Version: 1, NodeID: testOpts.NodeID, ClusterID: testOpts.ClusterID}
	if err := writeFileSync(filepath.Join(dir, metaFile), m); err != nil {
		t.Fatal(err)
	}
	b, err := raftboltdb.NewBoltStore(filepath.Join(dir, raftFile))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := first; i <= last && last != 0; i++ {
		if err := b.StoreLog(v1Entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.SetUint64([]byte("CurrentTerm"), 9); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readMeta(t *testing.T, dir string) meta {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		t.Fatal(err)
	}
	var m meta
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkMoved asserts an opened store holds first..last from v1Entry, the
// stable store kept its term, the meta file says version 2 and raft.db no
// longer holds the log.
func checkMoved(t *testing.T, dir string, first, last uint64) {
	t.Helper()
	s := openT(t, dir, testOpts)
	f, _ := s.Logs.FirstIndex()
	l, _ := s.Logs.LastIndex()
	if f != first || l != last {
		s.Close()
		t.Fatalf("log after the move is %d..%d, want %d..%d", f, l, first, last)
	}
	for i := first; i <= last && last != 0; i++ {
		var got raft.Log
		if err := s.Logs.GetLog(i, &got); err != nil || got.Term != v1Entry(i).Term || !bytes.Equal(got.Data, v1Entry(i).Data) {
			s.Close()
			t.Fatalf("entry %d after the move: %+v, %v", i, got, err)
		}
	}
	if term, err := s.Stable.GetUint64([]byte("CurrentTerm")); err != nil || term != 9 {
		t.Fatalf("stable store term after the move: %d, %v", term, err)
	}
	// Appends go on from the moved log.
	if last != 0 {
		if err := s.Logs.StoreLogs([]*raft.Log{v1Entry(last + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	if m := readMeta(t, dir); m.Version != 2 {
		t.Fatalf("meta version %d after the move, want 2", m.Version)
	}
	b, err := raftboltdb.NewBoltStore(filepath.Join(dir, raftFile))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if bl, _ := b.LastIndex(); bl != 0 {
		t.Fatalf("raft.db still holds entries up to %d after the move", bl)
	}
	if _, err := os.Stat(filepath.Join(dir, logDir+".tmp")); !os.IsNotExist(err) {
		t.Fatalf("the move left %s.tmp: %v", logDir, err)
	}
}

func TestMovesVersion1Log(t *testing.T) {
	for _, r := range [][2]uint64{{1, 700}, {350, 700}, {0, 0}} {
		t.Run(fmt.Sprintf("%d-%d", r[0], r[1]), func(t *testing.T) {
			dir := makeV1Dir(t, r[0], r[1])
			checkMoved(t, dir, r[0], r[1])
			// And a second open finds nothing more to do.
			s := openT(t, dir, testOpts)
			if l, _ := s.Logs.LastIndex(); r[1] != 0 && l != r[1]+1 {
				t.Fatalf("last index on the second open %d, want %d", l, r[1]+1)
			}
			s.Close()
		})
	}
}

// TestInterruptedMoveResumes: each state a crash can leave the move in
// opens to the whole log.
func TestInterruptedMoveResumes(t *testing.T) {
	t.Run("half-written copy", func(t *testing.T) {
		dir := makeV1Dir(t, 1, 300)
		tmp := filepath.Join(dir, logDir+".tmp")
		os.Mkdir(tmp, 0o750)
		os.WriteFile(filepath.Join(tmp, "00000000000000000001.log"), []byte("xcelog01 torn"), 0o640)
		checkMoved(t, dir, 1, 300)
	})
	t.Run("meta written, not renamed", func(t *testing.T) {
		dir := makeV1Dir(t, 1, 300)
		m := readMeta(t, dir)
		m.Version = 2
		writeFileSync(filepath.Join(dir, metaFile), m)
		checkMoved(t, dir, 1, 300)
	})
	t.Run("renamed, old copy not deleted", func(t *testing.T) {
		dir := makeV1Dir(t, 1, 300)
		checkMoved(t, dir, 1, 300) // log is now 1..301 in raft-log
		// Put a stale copy back into raft.db, as a crash before step 4
		// leaves it: raft-log wins and the copy goes.
		b, err := raftboltdb.NewBoltStore(filepath.Join(dir, raftFile))
		if err != nil {
			t.Fatal(err)
		}
		for i := uint64(1); i <= 50; i++ {
			b.StoreLog(&raft.Log{Index: i, Term: 99, Data: []byte("stale")})
		}
		b.Close()
		checkMoved(t, dir, 1, 301)
	})
}

func TestCorruptRaftLogRefused(t *testing.T) {
	dir := initDir(t)
	s := openT(t, dir, testOpts)
	for i := uint64(1); i <= 20; i++ {
		s.Logs.StoreLog(v1Entry(i))
	}
	s.Close()
	seg := filepath.Join(dir, logDir, "00000000000000000001.log")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[200] ^= 0x10 // inside entry 4 or so, with intact entries after it
	os.WriteFile(seg, b, 0o640)
	mustFail(t, dir, testOpts, ErrCorrupt, seg)
	if after, _ := os.ReadFile(seg); !bytes.Equal(after, b) {
		t.Fatal("a refused Open changed the damaged segment")
	}
}

func TestRaftLogWithoutMeta(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, logDir), 0o750)
	mustFail(t, dir, testOpts, ErrForeign, logDir, metaFile)
}
