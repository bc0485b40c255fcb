package ha

import (
	"testing"
	"time"
)

// SetVoters follows a configuration change: voters that stay keep their
// history, new ones start in contact, removed ones stop counting, and
// self counts only while it votes.
func TestQuorumSetVoters(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const window = 100 * time.Millisecond
	type op func(q *Quorum)
	set := func(v ...string) op { return func(q *Quorum) { q.SetVoters(v) } }
	fail := func(p string, at time.Duration) op { return func(q *Quorum) { q.Failed(p, t0.Add(at)) } }
	resume := func(p string, at time.Duration) op { return func(q *Quorum) { q.Resumed(p, t0.Add(at)) } }
	for _, c := range []struct {
		name   string
		ops    []op
		at     time.Duration
		want   bool
		voters int
	}{
		{"unchanged three", []op{set("n1", "n2", "n3")}, 0, true, 3},
		{"two failing of three, past the window", []op{fail("n2", 0), fail("n3", 0)}, 200 * time.Millisecond, false, 3},
		{"a failing voter keeps its history across a change", []op{fail("n2", 0), fail("n3", 0), set("n1", "n2", "n3", "n4")}, 200 * time.Millisecond, false, 4},
		{"a new voter starts in contact", []op{fail("n2", 0), set("n1", "n2", "n3", "n4")}, 200 * time.Millisecond, true, 4},
		{"two of five", []op{fail("n2", 0), fail("n3", 0), set("n1", "n2", "n3", "n4", "n5"), fail("n4", 0)}, 200 * time.Millisecond, false, 5},
		{"removing the failing voters restores the quorum", []op{fail("n2", 0), fail("n3", 0), set("n1", "n4", "n5")}, 200 * time.Millisecond, true, 3},
		{"a removed voter's signals are ignored", []op{set("n1", "n3"), fail("n2", 0), fail("n3", 0)}, 200 * time.Millisecond, false, 2},
		{"a removed voter added back starts afresh", []op{fail("n2", 0), set("n1", "n3"), set("n1", "n2", "n3"), fail("n3", 0)}, 200 * time.Millisecond, true, 3},
		{"self no longer a voter does not count", []op{set("n2", "n3", "n4"), fail("n4", 0)}, 200 * time.Millisecond, true, 3},
		{"self not a voter, two of three failing", []op{set("n2", "n3", "n4"), fail("n3", 0), fail("n4", 0)}, 200 * time.Millisecond, false, 3},
		{"an empty list changes nothing", []op{fail("n2", 0), fail("n3", 0), set()}, 200 * time.Millisecond, false, 3},
		{"duplicates count once", []op{set("n1", "n2", "n2", "n3"), fail("n2", 0), fail("n3", 0)}, 200 * time.Millisecond, false, 3},
		{"single voter after shrinking", []op{fail("n2", 0), fail("n3", 0), set("n1")}, 200 * time.Millisecond, true, 1},
		{"within the window", []op{fail("n2", 0), fail("n3", 50*time.Millisecond), set("n1", "n2", "n3")}, 120 * time.Millisecond, true, 3},
		{"resumed after the change", []op{fail("n2", 0), fail("n3", 0), set("n1", "n2", "n3"), resume("n3", 150*time.Millisecond)}, 200 * time.Millisecond, true, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := NewQuorum("n1", []string{"n1", "n2", "n3"}, window)
			q.Reset(t0)
			for _, o := range c.ops {
				o(q)
			}
			if got, _ := q.Has(t0.Add(c.at)); got != c.want {
				t.Errorf("Has = %v, want %v", got, c.want)
			}
			if q.Voters() != c.voters {
				t.Errorf("Voters = %d, want %d", q.Voters(), c.voters)
			}
		})
	}
}
