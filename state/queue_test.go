package state

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestQueueMatchesASlice: random pushes and pops agree with a slice model,
// across chunk boundaries, and the chunks held stay proportional to the
// elements held.
func TestQueueMatchesASlice(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var q queue[int]
	var model []int
	next := 0
	for step := range 200_000 {
		// Phases of growth and of draining, so the queue crosses many
		// chunks both ways and empties now and then.
		grow := step/20_000%2 == 0
		if len(model) == 0 || r.IntN(10) < 6 == grow {
			q.push(next)
			model = append(model, next)
			next++
		} else {
			if got := q.front(); got != model[0] {
				t.Fatalf("step %d: front %d, want %d", step, got, model[0])
			}
			if got := q.pop(); got != model[0] {
				t.Fatalf("step %d: pop %d, want %d", step, got, model[0])
			}
			model = model[1:]
		}
		if q.len() != len(model) {
			t.Fatalf("step %d: len %d, want %d", step, q.len(), len(model))
		}
		if max := len(model)/queueChunk + 2; len(q.chunks) > max {
			t.Fatalf("step %d: %d chunks for %d elements", step, len(q.chunks), len(model))
		}
		if step%997 == 0 && !slices.Equal(q.all(), model) {
			t.Fatalf("step %d: all() differs from the model", step)
		}
	}
	if next < 3*queueChunk {
		t.Fatalf("weak test: %d pushes", next)
	}

}

// Popped elements stay in their chunk (a view may read them) only until
// the chunk is popped through: then the queue drops it, and an emptied
// queue holds no chunk. A view keeps what it saw while the queue moves on.
func TestQueueDropsPoppedChunks(t *testing.T) {
	var q queue[int]
	for i := range queueChunk + 10 {
		if seq := q.push(i); seq != uint64(i) {
			t.Fatalf("push %d got sequence %d", i, seq)
		}
	}
	v := q.view()
	for range queueChunk {
		q.pop()
	}
	if len(q.chunks) != 1 {
		t.Fatalf("%d chunks after popping the first through", len(q.chunks))
	}
	if p, ok := q.at(queueChunk + 3); !ok || *p != queueChunk+3 {
		t.Fatalf("at(%d) = %v %v", queueChunk+3, p, ok)
	}
	if _, ok := q.at(5); ok {
		t.Fatal("at() finds a popped element")
	}
	for i := range 2 * queueChunk {
		q.push(-i)
	}
	got := v.all()
	if len(got) != queueChunk+10 || got[0] != 0 || got[len(got)-1] != queueChunk+9 {
		t.Fatalf("view changed: %d elements, %v … %v", len(got), got[0], got[len(got)-1])
	}
	for q.len() > 0 {
		q.pop()
	}
	if len(q.chunks) != 0 {
		t.Fatalf("an empty queue holds %d chunks", len(q.chunks))
	}
}

// Elements adopted in runs of any length, pushed and popped agree with a
// slice model, whatever is read by sequence number; every chunk but the
// last stays full.
func TestQueueAdopt(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var q queue[int]
	var model []int
	first, next := 0, 0
	for step := range 3000 {
		switch k := r.IntN(10); {
		case k < 3:
			run := make([]int, 1+r.IntN(3*queueChunk))
			for i := range run {
				run[i] = next
				next++
			}
			q.adopt(run)
			model = append(model, run...)
		case k < 6:
			q.push(next)
			model = append(model, next)
			next++
		default:
			for range min(len(model), r.IntN(2*queueChunk)) {
				if got := q.pop(); got != model[0] {
					t.Fatalf("step %d: pop %d, want %d", step, got, model[0])
				}
				model = model[1:]
				first++
			}
		}
		for i, c := range q.chunks[:max(len(q.chunks)-1, 0)] {
			if len(c) != queueChunk {
				t.Fatalf("step %d: chunk %d of %d holds %d", step, i, len(q.chunks), len(c))
			}
		}
		if len(model) > 0 {
			seq := first + r.IntN(len(model))
			if v, ok := q.at(uint64(seq)); !ok || *v != seq {
				t.Fatalf("step %d: at(%d) = %v, %v", step, seq, v, ok)
			}
		}
		if step%97 == 0 && !slices.Equal(q.all(), model) {
			t.Fatalf("step %d: all() differs from the model", step)
		}
	}
}
