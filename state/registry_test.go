package state

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// registryTasks returns the registry's tasks by id after checking its
// invariants: ids in strictly increasing order, each of the length its
// item records, and the arena's live bytes those of the ids.
func registryTasks(t testing.TB, r *registry) map[string]Task {
	t.Helper()
	out := make(map[string]Task, r.len())
	var prev []byte
	var used uint64
	ascendBlocks(r.blocks, 0, 0, func(it taskItem) bool {
		k := keyOf(r.arena.chunks, it)
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			t.Fatalf("registry out of order: %q then %q", prev, k)
		}
		if len(k) != it.klen() || it.state() >= numStates || it.flags&^flagsMask != 0 {
			t.Fatalf("bad item %+v for id %q", it, k)
		}
		prev = k
		used += uint64(roundedSlots(len(k)) * slotBytes)
		tk := r.task(it)
		out[tk.ID] = tk
		return true
	})
	for i, b := range r.blocks {
		if len(b.items) == 0 || len(b.items) > blockItems || b.gen > r.gen {
			t.Fatalf("block %d of %d holds %d items, generation %d of %d", i, len(r.blocks), len(b.items), b.gen, r.gen)
		}
	}
	if len(out) != r.len() {
		t.Fatalf("registry holds %d items, %d distinct ids", r.len(), len(out))
	}
	if used != r.arena.used {
		t.Fatalf("arena counts %d bytes in use, the ids take %d", r.arena.used, used)
	}
	return out
}

// TestRegistryAgainstAMap applies random inserts, state changes and
// removals to a registry and to a map, and checks after every step that
// they hold the same tasks in order; views taken along the way keep what
// they saw while the registry moves on and reuses freed ids' room.
func TestRegistryAgainstAMap(t *testing.T) {
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 1))
		r := newRegistry()
		model := map[string]Task{}
		type seen struct {
			v    *registryView
			want []Task
		}
		var views []seen
		checkView := func(s seen) {
			var got []Task
			s.v.ascend(func(it taskItem, id []byte) bool {
				got = append(got, taskOf(s.v.chunks, it))
				return true
			})
			if !slices.Equal(got, s.want) || s.v.len() != len(s.want) {
				t.Fatalf("seed %d: view changed: %d tasks, want %d", seed, len(got), len(s.want))
			}
		}
		ids := rng.IntN(2000) + 1 // a small id space: many collisions, removals and reinserts
		for step := range 6000 {
			id := fmt.Sprintf("%0*d", 1+rng.IntN(30), rng.IntN(ids))
			switch op := rng.IntN(10); {
			case op < 5:
				if _, ok := model[id]; ok {
					if _, ok := r.get(id); !ok {
						t.Fatalf("seed %d: %q missing", seed, id)
					}
					continue
				}
				tk := Task{ID: id, CreatedIndex: uint64(step), StandbyReplicas: uint32(rng.IntN(3)), Stateful: rng.IntN(2) == 0}
				r.add(&tk, stateUnassigned)
				tk.State, tk.PendingReason = TaskStatePending, reasonUnassigned
				model[id] = tk
			case op < 7:
				it, ok := r.get(id)
				if _, want := model[id]; ok != want {
					t.Fatalf("seed %d: get(%q) = %v, want %v", seed, id, ok, want)
				}
				if ok {
					it = it.withState(stateAssigned)
					r.set(it)
					model[id] = r.task(it)
				}
			case op < 9:
				got, ok := r.remove(id)
				want, had := model[id]
				if ok != had || got != want {
					t.Fatalf("seed %d: remove(%q) = %+v %v, want %+v %v", seed, id, got, ok, want, had)
				}
				delete(model, id)
			default:
				if len(views) < 3 && rng.IntN(2) == 0 {
					views = append(views, seen{r.view(), slices.SortedFunc(maps.Values(model), func(a, b Task) int { return strings.Compare(a.ID, b.ID) })})
				} else if len(views) > 0 {
					checkView(views[0])
					views[0].v.release()
					views = views[1:]
				}
			}
		}
		got := registryTasks(t, r)
		if !maps.Equal(got, model) {
			t.Fatalf("seed %d: registry holds %d tasks, model %d", seed, len(got), len(model))
		}
		for _, s := range views {
			checkView(s)
			s.v.release()
		}
		// Pages cover the registry in order.
		var paged []string
		for after := ""; ; {
			n := 0
			r.ascendAfter(after, func(it taskItem) bool {
				after = r.task(it).ID
				paged = append(paged, after)
				n++
				return n < 7
			})
			if n == 0 {
				break
			}
		}
		if want := slices.Sorted(maps.Keys(model)); !slices.Equal(paged, want) {
			t.Fatalf("seed %d: pages hold %d ids, want %d", seed, len(paged), len(want))
		}
	}
}

// Ids freed while a view is alive are not reused until it is released;
// then they are, and the arena stops growing.
func TestArenaReuseWaitsForViews(t *testing.T) {
	r := newRegistry()
	for i := range 1000 {
		r.add(&Task{ID: fmt.Sprintf("task-%04d", i)}, stateUnassigned)
	}
	v := r.view()
	for i := range 1000 {
		r.remove(fmt.Sprintf("task-%04d", i))
	}
	held := len(r.arena.chunks)
	for i := range 1000 {
		r.add(&Task{ID: fmt.Sprintf("next-%04d", i)}, stateUnassigned)
	}
	if len(r.arena.chunks) == held {
		t.Fatal("freed ids were reused while a view could read them")
	}
	n := 0
	v.ascend(func(it taskItem, id []byte) bool {
		if want := fmt.Sprintf("task-%04d", n); string(id) != want {
			t.Fatalf("view's id %d reads %q, want %q", n, id, want)
		}
		n++
		return true
	})
	v.release()
	for i := range 1000 {
		r.remove(fmt.Sprintf("next-%04d", i))
	}
	used, chunks := r.arena.used, len(r.arena.chunks)
	for i := range 1000 {
		r.add(&Task{ID: fmt.Sprintf("last-%04d", i)}, stateUnassigned)
	}
	if len(r.arena.chunks) != chunks || used != 0 {
		t.Fatalf("after release: %d chunks, was %d (used %d before)", len(r.arena.chunks), chunks, used)
	}
	registryTasks(t, r)
}

// ascend calls fn for each item in id order with the item's id bytes,
// which are valid only during the call.
func (v *registryView) ascend(fn func(it taskItem, id []byte) bool) {
	ascendBlocks(v.blocks, 0, 0, func(it taskItem) bool { return fn(it, keyOf(v.chunks, it)) })
}

// A registry written in parts (more than one, the last of fewer tasks
// than a block holds) reads back the same as one written as a list, and
// the registry read goes on taking inserts and removals as one built by
// them does.
func TestTaskPartsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 1))
	r := newRegistry()
	model := map[string]Task{}
	for len(model) < 2*partTasks+blockItems/2+3 {
		id := fmt.Sprintf("%x-%s", rng.Uint64(), strings.Repeat("x", rng.IntN(40)))
		if rng.IntN(500) == 0 {
			id = strings.Repeat("z", 1+rng.IntN(maxIDLen)) + id
			id = id[:min(len(id), maxIDLen)]
		}
		tk := Task{ID: id, CreatedIndex: rng.Uint64N(1 << 40), StandbyReplicas: rng.Uint32N(3), Weight: rng.Uint32N(5), Stateful: rng.IntN(2) == 0}
		if _, ok := r.add(&tk, uint8(rng.IntN(int(numStates)))); ok {
			model[id] = r.task(func() taskItem { it, _ := r.get(id); return it }())
		}
	}
	want := registryTasks(t, r)
	for _, tc := range []struct {
		version uint32
		how     string // how version 11 is read: "read", "mapped" or "decoded" (as on a big-endian machine)
	}{{9, ""}, {10, ""}, {snapshotVersion, "read"}, {snapshotVersion, "mapped"}, {snapshotVersion, "decoded"}} {
		version := tc.version
		v := r.view()
		var buf bytes.Buffer
		if err := writeTasks(&buf, v, version); err != nil {
			t.Fatal(err)
		}
		v.release()
		written := bytes.Clone(buf.Bytes())
		littleEndian = tc.how != "decoded"
		got, left, file := readTasksAs(t, &buf, version, tc.how == "mapped")
		littleEndian = true
		if left != 0 {
			t.Fatalf("version %d %s: %d bytes left unread", version, tc.how, left)
		}
		if (got.mapped != nil) != (tc.how == "mapped") {
			t.Fatalf("version %d %s: mapped %v", version, tc.how, got.mapped != nil)
		}
		if h := registryTasks(t, got); !maps.EqualFunc(h, want, func(a, b Task) bool { return a == b }) {
			t.Fatalf("version %d: read %d tasks, wrote %d, or they differ", version, len(h), len(want))
		}
		// The read registry changes as any does.
		m := maps.Clone(model)
		ids := slices.Sorted(maps.Keys(m))
		for i := range 3000 {
			if i%2 == 0 {
				id := ids[rng.IntN(len(ids))]
				if _, ok := got.remove(id); ok != (m[id].ID != "") {
					t.Fatalf("remove %q: %v", id, ok)
				}
				delete(m, id)
				continue
			}
			tk := Task{ID: fmt.Sprintf("%x", rng.Uint64())}
			if _, ok := got.add(&tk, stateUnassigned); ok {
				m[tk.ID] = got.task(func() taskItem { it, _ := got.get(tk.ID); return it }())
			}
		}
		if h := registryTasks(t, got); len(h) != len(m) {
			t.Fatalf("version %d: %d tasks after changes, want %d", version, len(h), len(m))
		} else {
			for id, tk := range m {
				if h[id] != tk {
					t.Fatalf("version %d: task %q is %+v, want %+v", version, id, h[id], tk)
				}
			}
		}
		// Changes to a mapped registry stay in memory.
		if b, err := os.ReadFile(file); file != "" && (err != nil || !bytes.Equal(b, written)) {
			t.Fatalf("version %d %s: the snapshot file changed under its registry (%v)", version, tc.how, err)
		}
	}
}

// readTasksAs reads the task section in buf as readSnapshot would, from a
// file it maps where mapped, and returns the registry, how many bytes it
// left unread, and the file.
func readTasksAs(t *testing.T, buf *bytes.Buffer, version uint32, mapped bool) (*registry, int, string) {
	t.Helper()
	if !mapped {
		got, err := readTasks(bufio.NewReaderSize(buf, snapshotBuffer), version)
		if err != nil {
			t.Fatalf("version %d: %v", version, err)
		}
		return got, buf.Len(), ""
	}
	got, src, left, err := readMappedFile(t, buf.Bytes())
	if err != nil || src.m == nil {
		t.Fatalf("version %d mapped (%v): %v", version, src.m != nil, err)
	}
	return got, left, src.file.Name()
}

// openedFile is a file holding b, open for reading until the test ends.
func openedFile(t *testing.T, b []byte) *os.File {
	t.Helper()
	file := filepath.Join(t.TempDir(), "state.bin")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// fileReader reads a file and hands it over, as raft's snapshot readers do.
type fileReader struct{ f *os.File }

func (r fileReader) Read(p []byte) (int, error) { return r.f.Read(p) }
func (r fileReader) SnapshotFile() *os.File     { return r.f }

// A mapped task section is checked as a read one is: a changed byte in an
// item is refused.
func TestMappedTasksRefuseBadItems(t *testing.T) {
	r := newRegistry()
	for _, id := range []string{"a", "b", "c"} {
		r.add(&Task{ID: id}, stateUnassigned)
	}
	// The count, the part's count and ids' length, its padding's length,
	// then four zeros: the first item is at 8.
	good := mappedSection(t, r)
	if !bytes.Equal(good[:8], []byte{3, 3, 24, 4, 0, 0, 0, 0}) {
		t.Fatalf("section starts % x", good[:8])
	}
	for _, tc := range []struct {
		at   int
		b    byte
		want string
	}{{8 + 22, 0x08, "flags"}, {8 + 23, 1, "padding is not zero"}, {8 + 6, 0, "id of 0 bytes"}, {8 + 24, 0, "not the place of its id"}, {8 + 3*24, 'b', "does not follow"}} {
		bad := bytes.Clone(good)
		bad[tc.at] = tc.b
		_, src, _, err := readMappedFile(t, bad)
		if src.m == nil || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("byte %d set to %#x: mapped %v, error %v, want %q", tc.at, tc.b, src.m != nil, err, tc.want)
		}
	}
}

// mappedSection is r's task section in version 11.
func mappedSection(t *testing.T, r *registry) []byte {
	t.Helper()
	v := r.view()
	defer v.release()
	var buf bytes.Buffer
	if err := writeTasks(&buf, v, snapshotVersion); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readMappedFile reads the task section b from a file it maps, and
// returns what readMappedParts does, its source and how many bytes it
// left unread.
func readMappedFile(t *testing.T, b []byte) (*registry, *snapshotSource, int, error) {
	t.Helper()
	src := newSnapshotSource(fileReader{openedFile(t, b)})
	src.useMapping()
	r := bufio.NewReaderSize(src, snapshotBuffer)
	reg, err := readMappedParts(r, src)
	return reg, src, len(b) - int(src.off) + r.Buffered(), err
}

// A snapshot file restores the same mapped as read, and a mapped state
// goes on taking writes.
func TestRestoreMapped(t *testing.T) {
	f := buildFSM(t, "c1")
	b := persistSnapshot(t, f)
	fh := openedFile(t, b)
	file := fh.Name()
	mapped, read := NewFSM("c1"), NewFSM("c1")
	if err := mapped.Restore(fileReader{fh}); err != nil {
		t.Fatal(err)
	}
	if err := restoreBytes(read, b); err != nil {
		t.Fatal(err)
	}
	if mapped.tasks.mapped == nil {
		t.Fatal("the registry was read, not mapped")
	}
	if got, want := stateOf(t, mapped), stateOf(t, read); !reflect.DeepEqual(got, want) {
		t.Fatalf("mapped restore:\n%+v\nread restore:\n%+v", got, want)
	}
	checkBuiltBehaviour(t, mapped)
	if after, err := os.ReadFile(file); err != nil || !bytes.Equal(after, b) {
		t.Fatalf("the snapshot file changed under its state (%v)", err)
	}
}

// A request id table of several parts, the last not a whole number of
// queue chunks, restores whole (read and mapped), and the restored table
// goes on remembering as one built by its writes does.
func TestDedupPartsRoundTrip(t *testing.T) {
	const n = 2*partEntries + queueChunk/3
	f := NewFSM("c1")
	for i := uint64(1); i <= n; i++ {
		apply(t, f, i, submitCmd(fmt.Sprint("client-", i%7), fmt.Sprint(i), fmt.Sprint("t", i)))
	}
	b := persistSnapshot(t, f)
	fh := openedFile(t, b)
	read, mapped := NewFSM("c1"), NewFSM("c1")
	if err := restoreBytes(read, b); err != nil {
		t.Fatal(err)
	}
	if err := mapped.Restore(fileReader{fh}); err != nil {
		t.Fatal(err)
	}
	want := stateOf(t, f)
	for name, g := range map[string]*FSM{"read": read, "mapped": mapped} {
		if got := stateOf(t, g); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: restored state differs", name)
		}
		for i := uint64(n + 1); i <= n+queueChunk; i++ {
			apply(t, g, i, submitCmd("client-new", fmt.Sprint(i), fmt.Sprint("t", i)))
			apply(t, f, i, submitCmd("client-new", fmt.Sprint(i), fmt.Sprint("t", i)))
		}
		for k, i := range []uint64{1, n / 2, n, n + 5} {
			c := fmt.Sprint("client-", i%7)
			if i > n {
				c = "client-new"
			}
			if r := apply(t, g, n+queueChunk+1+uint64(k), submitCmd(c, fmt.Sprint(i), fmt.Sprint("t", i))); r.Index != i {
				t.Fatalf("%s: request %d of %s answered %+v, not its first result", name, i, c, r)
			}
		}
		f = NewFSM("c1")
		if err := restoreBytes(f, b); err != nil {
			t.Fatal(err)
		}
	}
}
