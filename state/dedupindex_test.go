package state

import "testing"

// TestDedupIndexClashes runs the index with every hash alike (mask 0), so
// that all keys but one clash, through puts, finds and removes in the
// order the FSM makes them.
func TestDedupIndexClashes(t *testing.T) {
	for _, mask := range []uint64{^uint64(0), 0} {
		var q queue[dedupEntry]
		x := newDedupIndex(0)
		x.mask = mask
		key := func(r string) dedupKey { return dedupKey{"c", r} }
		push := func(r string) {
			t.Helper()
			seq := q.push(dedupEntry{Client: "c", Request: r})
			if !x.put(&q, key(r), seq) {
				t.Fatalf("mask %x: put %s refused", mask, r)
			}
		}
		pop := func() {
			seq := q.pushed - uint64(q.len())
			e := q.pop()
			x.remove(key(e.Request), seq)
		}
		want := func(held ...string) {
			t.Helper()
			if x.len() != len(held) {
				t.Fatalf("mask %x: %d keys indexed, want %d", mask, x.len(), len(held))
			}
			for _, r := range held {
				seq, ok := x.find(&q, key(r))
				e, at := q.at(seq)
				if !ok || !at || e.Request != r {
					t.Fatalf("mask %x: find %s = %d, %v", mask, r, seq, ok)
				}
			}
		}
		push("a")
		push("b")
		push("c")
		want("a", "b", "c")
		if x.put(&q, key("b"), 99) || x.put(&q, key("a"), 99) {
			t.Fatalf("mask %x: a key indexed twice", mask)
		}
		if _, ok := x.find(&q, key("d")); ok {
			t.Fatalf("mask %x: found d, never put", mask)
		}
		pop() // a: the clashing keys stay found
		want("b", "c")
		push("d") // takes the hash a left
		want("b", "c", "d")
		pop()
		pop()
		want("d")
		pop()
		want()
	}
}
