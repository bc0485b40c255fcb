package persist

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/xce/xce/state"
)

var testOpts = Options{NodeID: "n1", ClusterID: "c1"}

func openT(t *testing.T, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return s
}

// openNoPanic runs Open and turns a panic into a test failure.
func openNoPanic(t *testing.T, dir string, opts Options) (s *Store, err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Open(%s) panicked: %v", dir, r)
		}
	}()
	return Open(dir, opts)
}

// mustFail checks that Open fails with target and that the failed Open left
// the dir unlocked.
func mustFail(t *testing.T, dir string, opts Options, target error, mentions ...string) {
	t.Helper()
	s, err := openNoPanic(t, dir, opts)
	if err == nil {
		s.Close()
		t.Fatalf("Open(%s) succeeded, want %v", dir, target)
	}
	if !errors.Is(err, target) {
		t.Fatalf("Open(%s): %v, want errors.Is %v", dir, err, target)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Fatalf("Open error %q does not mention %q", err, m)
		}
	}
	lock, lerr := acquireLock(dir, 0)
	if lerr != nil {
		t.Fatalf("failed Open left the dir locked: %v", lerr)
	}
	lock.Close()
}

// initDir creates a data dir with a meta file and an empty log store.
func initDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	openT(t, dir, testOpts).Close()
	return dir
}

func TestOpenCreatesDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b", "data")
	s := openT(t, dir, testOpts)
	defer s.Close()
	if s.Dir != dir {
		t.Fatalf("Dir = %q", s.Dir)
	}
	for _, name := range []string{lockFile, metaFile, raftFile, snapDir} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, metaFile+".tmp")); !os.IsNotExist(err) {
		t.Fatalf("temporary meta file left behind: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, lockFile))
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("LOCK holds %q (%v), want our pid %d", b, err, os.Getpid())
	}
	var m meta
	b, err = os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("meta file: %v: %s", err, b)
	}
	if want := (meta{Format: metaFormat, Version: metaVersion, NodeID: "n1", ClusterID: "c1"}); m != want {
		t.Fatalf("meta = %+v, want %+v", m, want)
	}
	if has, err := s.HasState(); err != nil || has {
		t.Fatalf("fresh dir: HasState = %v, %v", has, err)
	}
}

func TestOpenExistingEmptyDir(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, testOpts)
	s.Close()
	// A stale LOCK file with a dead pid never blocks.
	if err := os.WriteFile(filepath.Join(dir, lockFile), []byte("999999999\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, testOpts)
	defer s.Close()
	if has, err := s.HasState(); err != nil || has {
		t.Fatalf("reopened empty dir: HasState = %v, %v", has, err)
	}
}

func TestLogsPersistAndHasState(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, testOpts)
	setTerm(t, s, 2)
	logs := []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogCommand, Data: submitTask("t")},
		{Index: 2, Term: 1, Type: raft.LogNoop},
		{Index: 3, Term: 2, Type: raft.LogCommand, Data: []byte("x")},
	}
	if err := s.Logs.StoreLog(logs[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.Logs.StoreLogs(logs[1:]); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openT(t, dir, testOpts)
	defer s.Close()
	if has, err := s.HasState(); err != nil || !has {
		t.Fatalf("after storing a log: HasState = %v, %v", has, err)
	}
	first, _ := s.Logs.FirstIndex()
	last, _ := s.Logs.LastIndex()
	if first != 1 || last != 3 {
		t.Fatalf("indexes %d..%d, want 1..3", first, last)
	}
	for _, want := range logs {
		var got raft.Log
		if err := s.Logs.GetLog(want.Index, &got); err != nil {
			t.Fatal(err)
		}
		if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type || !bytes.Equal(got.Data, want.Data) {
			t.Fatalf("log %d: got %+v, want %+v", want.Index, got, want)
		}
	}
	if err := s.Logs.DeleteRange(1, 2); err != nil {
		t.Fatal(err)
	}
	if first, _ := s.Logs.FirstIndex(); first != 3 {
		t.Fatalf("FirstIndex after DeleteRange = %d", first)
	}
}

func TestStableStorePersists(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, testOpts)
	if err := s.Stable.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := s.Stable.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
		t.Fatal(err)
	}
	if err := s.Stable.SetUint64([]byte("LastVoteTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openT(t, dir, testOpts)
	defer s.Close()
	if v, err := s.Stable.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
		t.Fatalf("CurrentTerm = %d, %v", v, err)
	}
	if v, err := s.Stable.GetUint64([]byte("LastVoteTerm")); err != nil || v != 7 {
		t.Fatalf("LastVoteTerm = %d, %v", v, err)
	}
	if v, err := s.Stable.Get([]byte("LastVoteCand")); err != nil || string(v) != "n2" {
		t.Fatalf("LastVoteCand = %q, %v", v, err)
	}
	// A term alone is raft state: this node must not bootstrap again.
	if has, err := s.HasState(); err != nil || !has {
		t.Fatalf("HasState with a stored term = %v, %v", has, err)
	}
}

func TestSnapshotStorePersists(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, testOpts)
	setTerm(t, s, 2)
	sink, err := s.Snaps.Create(raft.SnapshotVersionMax, 10, 2, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := state.NewFSM("c1")
	f.Apply(1, 1, submitTask("a"))
	f.Apply(2, 1, submitTask("b"))
	var want bytes.Buffer
	if err := f.Snapshot().Write(&want); err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(want.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = openT(t, dir, testOpts)
	defer s.Close()
	if has, err := s.HasState(); err != nil || !has {
		t.Fatalf("HasState with a snapshot = %v, %v", has, err)
	}
	metas, err := s.Snaps.List()
	if err != nil || len(metas) != 1 || metas[0].Index != 10 {
		t.Fatalf("List = %+v, %v", metas, err)
	}
	_, rc, err := s.Snaps.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	g := state.NewFSM("c1")
	if err := g.Restore(rc); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := g.Snapshot().Write(&got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) || g.NumTasks() != 2 {
		t.Fatalf("restored %d tasks; snapshot\n%s\nwant\n%s", g.NumTasks(), got.Bytes(), want.Bytes())
	}
}

// submitTask is the encoded command that creates task id.
func submitTask(id string) []byte {
	return (&state.Command{Type: state.CmdSubmitTask, Task: state.Task{ID: id}}).Encode()
}

func TestSecondOpenFailsFast(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, testOpts)
	defer s.Close()

	start := time.Now()
	mine := fmt.Sprintf("pid %d", os.Getpid())
	s2, err := Open(dir, testOpts)
	if err == nil {
		s2.Close()
		t.Fatal("second Open of a held dir succeeded")
	}
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), mine) {
		t.Fatalf("second Open: %v; want ErrLocked naming %s and %s", err, dir, mine)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Open with LockWait 0 took %v", d)
	}
	// The refused Open disturbed nothing.
	if b, _ := os.ReadFile(filepath.Join(dir, lockFile)); strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("LOCK now holds %q", b)
	}
	if err := s.Logs.StoreLog(&raft.Log{Index: 1, Term: 1}); err != nil {
		t.Fatalf("first store after a refused Open: %v", err)
	}

	// An unreadable pid in LOCK is reported as "another process".
	if err := os.WriteFile(filepath.Join(dir, lockFile), []byte("garbage"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, testOpts); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("Open with garbage LOCK contents: %v", err)
	}
}

func TestLockWaitTimesOut(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, testOpts)
	defer s.Close()
	const wait = 100 * time.Millisecond
	start := time.Now()
	_, err := Open(dir, Options{NodeID: "n1", ClusterID: "c1", LockWait: wait})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("got %v, want ErrLocked", err)
	}
	if d := time.Since(start); d < wait || d > wait+2*time.Second {
		t.Fatalf("Open waited %v, want about %v", d, wait)
	}
}

func TestLockWaitSucceedsWhenReleased(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, testOpts)
	closed := make(chan error, 1)
	go func() {
		time.Sleep(50 * time.Millisecond) // the holder lets go while we wait
		closed <- s.Close()
	}()
	start := time.Now()
	s2, err := Open(dir, Options{NodeID: "n1", ClusterID: "c1", LockWait: 300 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open with LockWait: %v", err)
	}
	defer s2.Close()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Fatalf("Open returned after %v, before the holder closed", d)
	}
	if has, err := s2.HasState(); err != nil || has {
		t.Fatalf("HasState = %v, %v", has, err)
	}
}

func TestForeignMeta(t *testing.T) {
	dir := initDir(t)
	mustFail(t, dir, Options{NodeID: "n2", ClusterID: "c1"}, ErrForeign, dir, `"n1"`, `"n2"`)
	mustFail(t, dir, Options{NodeID: "n1", ClusterID: "c2"}, ErrForeign, `"c1"`, `"c2"`)
	mustFail(t, dir, Options{NodeID: "n9", ClusterID: "c9"}, ErrForeign, `"n1"`, `"c1"`, `"n9"`, `"c9"`)
	// The refusals changed nothing: the owner still opens it.
	openT(t, dir, testOpts).Close()
}

func TestBadMetaFile(t *testing.T) {
	cases := map[string]string{
		"garbage":      "\x00\x01 this is not json",
		"empty":        "",
		"json array":   "[1,2,3]",
		"other format": `{"format":"something-else","version":1,"node_id":"n1","cluster_id":"c1"}`,
		"no format":    `{"version":1,"node_id":"n1","cluster_id":"c1"}`,
		"newer layout": `{"format":"xce-data","version":3,"node_id":"n1","cluster_id":"c1"}`,
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			dir := initDir(t)
			path := filepath.Join(dir, metaFile)
			if err := os.WriteFile(path, []byte(content), 0o640); err != nil {
				t.Fatal(err)
			}
			mustFail(t, dir, testOpts, ErrForeign, path)
			if b, _ := os.ReadFile(path); string(b) != content {
				t.Fatal("refused Open rewrote the meta file")
			}
		})
	}
}

func writeRandom(t *testing.T, path string, n int, seed uint64) []byte {
	t.Helper()
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if err := os.WriteFile(path, b, 0o640); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCorruptRaftDB(t *testing.T) {
	for _, n := range []int{1, 31, 32, 4095, 4096, 3 * 4096, 64 << 10} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			dir := initDir(t)
			path := filepath.Join(dir, raftFile)
			writeRandom(t, path, n, 1)
			mustFail(t, dir, testOpts, ErrCorrupt, path)
		})
	}
	// Random pages behind a bbolt magic get past the sniff; bbolt's meta
	// checksums must still refuse them.
	t.Run("magic then random", func(t *testing.T) {
		dir := initDir(t)
		path := filepath.Join(dir, raftFile)
		b := writeRandom(t, path, 4*4096, 2)
		for _, off := range []int{16, 4096 + 16} {
			binary.LittleEndian.PutUint32(b[off:], 0xED0CDAED)
		}
		if err := os.WriteFile(path, b, 0o640); err != nil {
			t.Fatal(err)
		}
		mustFail(t, dir, testOpts, ErrCorrupt, path)
	})
	// A JSON or text file where the bolt file should be.
	t.Run("text", func(t *testing.T) {
		dir := initDir(t)
		path := filepath.Join(dir, raftFile)
		if err := os.WriteFile(path, []byte(`{"format":"xce-data"}`), 0o640); err != nil {
			t.Fatal(err)
		}
		mustFail(t, dir, testOpts, ErrCorrupt, path)
	})
}

// TestRaftDBWithoutMeta: a raft.db we did not create (no meta file beside
// it) is refused, whatever it holds, and no meta file is written.
func TestRaftDBWithoutMeta(t *testing.T) {
	src := t.TempDir()
	s := openT(t, src, testOpts)
	if err := s.Logs.StoreLog(&raft.Log{Index: 1, Term: 1}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	real, err := os.ReadFile(filepath.Join(src, raftFile))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"bolt": real, "random": bytes.Repeat([]byte{0x5a}, 5000), "empty": nil} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, raftFile), content, 0o640); err != nil {
				t.Fatal(err)
			}
			mustFail(t, dir, testOpts, ErrForeign, dir, raftFile, metaFile)
			if _, err := os.Stat(filepath.Join(dir, metaFile)); !os.IsNotExist(err) {
				t.Fatalf("refused Open wrote a meta file: %v", err)
			}
		})
	}
}

func TestEmptyRaftDBAccepted(t *testing.T) {
	dir := initDir(t)
	if err := os.WriteFile(filepath.Join(dir, raftFile), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	s := openT(t, dir, testOpts)
	if has, err := s.HasState(); err != nil || has {
		t.Fatalf("HasState = %v, %v", has, err)
	}
	setTerm(t, s, 1)
	if err := s.Logs.StoreLog(&raft.Log{Index: 1, Term: 1}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openT(t, dir, testOpts)
	defer s.Close()
	if has, err := s.HasState(); err != nil || !has {
		t.Fatalf("HasState after a log = %v, %v", has, err)
	}
}

// setTerm stores raft's current term, as raft does before it stores
// entries of that term.
func setTerm(t *testing.T, s *Store, term uint64) {
	t.Helper()
	if err := s.Stable.SetUint64([]byte("CurrentTerm"), term); err != nil {
		t.Fatal(err)
	}
}

func TestOpenOnAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	if s, err := openNoPanic(t, path, testOpts); err == nil {
		s.Close()
		t.Fatal("Open of a regular file succeeded")
	} else if !strings.Contains(err.Error(), path) {
		t.Fatalf("error %q does not name %s", err, path)
	}
}

const holdEnv = "XCE_PERSIST_TEST_HOLD_DIR"

// TestHelperHoldLock is not a test: TestLockAcrossProcesses runs it in a
// child process, where it opens the data dir and holds it until its stdin
// closes.
func TestHelperHoldLock(t *testing.T) {
	dir := os.Getenv(holdEnv)
	if dir == "" {
		t.Skip("helper process for TestLockAcrossProcesses")
	}
	s, err := Open(dir, testOpts)
	if err != nil {
		fmt.Printf("OPEN-FAILED %v\n", err)
		os.Exit(3)
	}
	fmt.Println("HOLDING")
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Close()
}

func TestLockAcrossProcesses(t *testing.T) {
	dir := initDir(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldLock$", "-test.count=1", "-test.v=false")
	cmd.Env = append(os.Environ(), holdEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		stdin.Close()
		if !waited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})

	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
		io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		if strings.TrimSpace(l) != "HOLDING" {
			t.Fatalf("child: %q, stderr: %s", l, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("child did not take the lock")
	}

	pid := cmd.Process.Pid
	_, err = Open(dir, testOpts)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("Open of a dir held by pid %d: %v, want ErrLocked", pid, err)
	}
	if want := fmt.Sprintf("pid %d", pid); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("error %q does not name %q and %s", err, want, dir)
	}

	// SIGKILL: no Close runs, the kernel drops the flock, and the stale pid
	// left in LOCK does not matter.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitErr := cmd.Wait()
	waited = true
	if ee, ok := waitErr.(*exec.ExitError); !ok || ee.Success() {
		t.Fatalf("child exit: %v", waitErr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, lockFile)); strings.TrimSpace(string(b)) != strconv.Itoa(pid) {
		t.Fatalf("LOCK holds %q, want the dead child's pid %d", b, pid)
	}
	s := openT(t, dir, testOpts)
	defer s.Close()
	if b, _ := os.ReadFile(filepath.Join(dir, lockFile)); strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("LOCK holds %q after reopen, want our pid", b)
	}
}

const openEnv = "XCE_PERSIST_TEST_OPEN_DIR"

// TestHelperOpen is not a test: TestCorruptRaftDBNeverCrashes runs it in a
// child process, where a crash inside bbolt cannot take the test binary down.
func TestHelperOpen(t *testing.T) {
	dir := os.Getenv(openEnv)
	if dir == "" {
		t.Skip("helper process for TestCorruptRaftDBNeverCrashes")
	}
	opts := testOpts
	opts.CheckBolt = checkInChild
	s, err := Open(dir, opts)
	if err == nil {
		s.Close()
	}
	fmt.Printf("OPEN-RETURNED %v\n", err)
}

const checkEnv = "XCE_PERSIST_TEST_CHECK_FILE"

// TestHelperCheckBolt is not a test: checkInChild runs it in a child
// process, as the server runs `xce check-db`.
func TestHelperCheckBolt(t *testing.T) {
	path := os.Getenv(checkEnv)
	if path == "" {
		t.Skip("helper process for checkInChild")
	}
	if err := CheckBoltFile(path); err != nil {
		fmt.Printf("CHECK-FAILED %v\n", err)
		os.Exit(1)
	}
	fmt.Println("CHECK-OK")
}

func checkInChild(path string) error {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCheckBolt$", "-test.count=1")
	cmd.Env = append(os.Environ(), checkEnv+"="+path)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("CHECK-OK")) {
		first, _, _ := strings.Cut(string(out), "\n")
		return fmt.Errorf("check failed (%v): %s", err, first)
	}
	return nil
}

// TestCorruptRaftDBNeverCrashes: a raft.db cut short must make Open return
// an error, never kill the process (bbolt would die with SIGBUS reading its
// mapping past EOF; sniffBolt checks the size against the meta page first).
// A flipped bit inside a data page makes bbolt v1.4.3 panic in a goroutine of
// its own (DB.freepages), which no recover can catch: Open runs the check
// (CheckBolt) in a child process first, as the server does.
func TestCorruptRaftDBNeverCrashes(t *testing.T) {
	src := initDir(t)
	s := openT(t, src, testOpts)
	for i := uint64(1); i <= 300; i++ {
		if err := s.Logs.StoreLog(&raft.Log{Index: i, Term: 1, Data: make([]byte, 100)}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	orig, err := os.ReadFile(filepath.Join(src, raftFile))
	if err != nil {
		t.Fatal(err)
	}
	metaBytes, err := os.ReadFile(filepath.Join(src, metaFile))
	if err != nil {
		t.Fatal(err)
	}
	type variant struct {
		name string
		b    []byte
	}
	var variants []variant
	for _, pages := range []int{2, 9, 10, 17, 32} {
		if pages*4096 < len(orig) {
			variants = append(variants, variant{fmt.Sprint("truncated to ", pages, " pages"), orig[:pages*4096]})
		}
	}
	for pg := 2; pg < 20 && (pg+1)*4096 <= len(orig); pg++ {
		b := bytes.Clone(orig)
		b[pg*4096+20] ^= 0x10
		variants = append(variants, variant{fmt.Sprint("bit flip in page ", pg), b})
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, metaFile), metaBytes, 0o640); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, raftFile), v.b, 0o640); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperOpen$", "-test.count=1")
			cmd.Env = append(os.Environ(), openEnv+"="+dir)
			out, err := cmd.CombinedOutput()
			if err != nil || !bytes.Contains(out, []byte("OPEN-RETURNED")) {
				first, _, _ := strings.Cut(string(out), "\n\n")
				t.Fatalf("Open crashed the process (%v):\n%s", err, first)
			}
			t.Logf("%s", bytes.TrimSpace(out[bytes.Index(out, []byte("OPEN-RETURNED")):]))
		})
	}
}
