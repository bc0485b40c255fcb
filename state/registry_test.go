package state

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
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
	for _, version := range []uint32{9, snapshotVersion} {
		v := r.view()
		var buf bytes.Buffer
		if err := writeTasks(&buf, v, version); err != nil {
			t.Fatal(err)
		}
		v.release()
		got, err := readTasks(bufio.NewReaderSize(&buf, snapshotBuffer), version)
		if err != nil {
			t.Fatalf("version %d: %v", version, err)
		}
		if buf.Len() != 0 {
			t.Fatalf("version %d: %d bytes left unread", version, buf.Len())
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
	}
}
