package worker

import (
	"maps"
	"slices"
	"testing"
	"time"
)

func testSim() *Sim {
	return NewSim(SimConfig{RestoreRate: 20_000, GrowthRate: 10_000, InitialLag: 50_000, DropLag: 100_000, DropAfter: 60 * time.Second})
}

func wantLags(t *testing.T, s *Sim, want map[string]int64) {
	t.Helper()
	if got := s.Lags(); !maps.Equal(got, want) {
		t.Fatalf("lags %v, want %v", got, want)
	}
}

func TestSimRestoreToZero(t *testing.T) {
	s := testSim()
	wantLags(t, s, map[string]int64{})
	s.Assign([]string{"a"}, []string{"s"}, []string{"w"})
	wantLags(t, s, map[string]int64{"a": 50_000, "s": 50_000, "w": 50_000})
	if s.Role("a") != Active || s.Role("s") != Standby || s.Role("w") != Warmup || s.Role("x") != Unheld {
		t.Fatalf("roles %v %v %v %v", s.Role("a"), s.Role("s"), s.Role("w"), s.Role("x"))
	}
	up, dropped := s.Advance(time.Second)
	if up != nil || dropped != nil {
		t.Fatalf("after 1s: caught up %v, dropped %v", up, dropped)
	}
	wantLags(t, s, map[string]int64{"a": 30_000, "s": 30_000, "w": 30_000})
	// Fractions of a record accumulate and are reported rounded up.
	for range 1000 {
		s.Advance(50 * time.Microsecond) // one record each
	}
	wantLags(t, s, map[string]int64{"a": 29_000, "s": 29_000, "w": 29_000})
	s.Advance(time.Nanosecond)
	if l, _ := s.Lag("a"); l != 29_000 {
		t.Fatalf("a fraction of a record below 29000 reports %d, want 29000 (rounded up)", l)
	}
	up, _ = s.Advance(10 * time.Second)
	if !slices.Equal(up, []string{"a", "s", "w"}) {
		t.Fatalf("caught up %v", up)
	}
	wantLags(t, s, map[string]int64{"a": 0, "s": 0, "w": 0})
	// Caught-up copies stay at 0, and are not reported as caught up again.
	up, _ = s.Advance(time.Minute)
	if up != nil {
		t.Fatalf("caught up again: %v", up)
	}
	wantLags(t, s, map[string]int64{"a": 0, "s": 0, "w": 0})
}

func TestSimPromotionKeepsState(t *testing.T) {
	s := testSim()
	s.Assign(nil, nil, []string{"t"})
	s.Advance(2 * time.Second) // 50000 → 10000
	s.Assign([]string{"t"}, nil, nil)
	if l, _ := s.Lag("t"); l != 10_000 || s.Role("t") != Active {
		t.Fatalf("promoted warm-up: lag %d role %v", l, s.Role("t"))
	}
	s.Advance(250 * time.Millisecond)
	wantLags(t, s, map[string]int64{"t": 5_000})
}

func TestSimUnheldGrowsThenDrops(t *testing.T) {
	s := testSim()
	s.Assign([]string{"t", "u"}, nil, nil)
	s.Advance(time.Hour)
	wantLags(t, s, map[string]int64{"t": 0, "u": 0})
	s.Assign([]string{"u"}, nil, nil) // t moves away
	if s.Role("t") != Unheld {
		t.Fatalf("role %v", s.Role("t"))
	}
	s.Advance(3 * time.Second)
	wantLags(t, s, map[string]int64{"t": 30_000, "u": 0})
	// Back before the bound: the state is still there, and restores.
	s.Assign([]string{"u"}, []string{"t"}, nil)
	s.Advance(time.Second)
	wantLags(t, s, map[string]int64{"t": 10_000, "u": 0})
	// Gone again: dropped once the lag passes DropLag (100000): at 10000
	// records/s that is after 9s of growth (at exactly 100000 it stays).
	s.Assign([]string{"u"}, nil, nil)
	_, dropped := s.Advance(9 * time.Second)
	if dropped != nil {
		t.Fatalf("dropped %v at the bound", dropped)
	}
	wantLags(t, s, map[string]int64{"t": 100_000, "u": 0})
	_, dropped = s.Advance(time.Millisecond)
	if !slices.Equal(dropped, []string{"t"}) {
		t.Fatalf("dropped %v", dropped)
	}
	wantLags(t, s, map[string]int64{"u": 0})
	if _, ok := s.Lag("t"); ok {
		t.Fatal("dropped task still has a lag")
	}
	// Assigned again: no state, so from the initial lag.
	// (u is unheld now, at 0 until time passes.)
	s.Assign(nil, nil, []string{"t"})
	wantLags(t, s, map[string]int64{"t": 50_000, "u": 0})
	if s.Role("u") != Unheld {
		t.Fatalf("u: role %v", s.Role("u"))
	}
}

func TestSimDropAfterTime(t *testing.T) {
	s := NewSim(SimConfig{RestoreRate: 1000, GrowthRate: 1, InitialLag: 10, DropLag: 1_000_000, DropAfter: time.Minute})
	s.Assign([]string{"t"}, nil, nil)
	s.Assign(nil, nil, nil)
	for range 59 {
		if _, d := s.Advance(time.Second); d != nil {
			t.Fatalf("dropped %v early", d)
		}
	}
	// Unheld, then held and released again: the clock starts over.
	s.Assign(nil, []string{"t"}, nil)
	s.Assign(nil, nil, nil)
	if _, d := s.Advance(59 * time.Second); d != nil {
		t.Fatalf("dropped %v: the unheld time did not restart", d)
	}
	if _, d := s.Advance(time.Second); !slices.Equal(d, []string{"t"}) {
		t.Fatalf("dropped %v after 60s unheld", d)
	}
}

func TestSimZeroInitialLag(t *testing.T) {
	s := NewSim(SimConfig{RestoreRate: 1, GrowthRate: 1, DropLag: 10, DropAfter: time.Minute})
	s.Assign([]string{"a"}, []string{"a", "b"}, nil)
	wantLags(t, s, map[string]int64{"a": 0, "b": 0})
	if s.Role("a") != Active {
		t.Fatalf("a task in two lists: role %v, want active", s.Role("a"))
	}
	if got := s.Tasks(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("tasks %v", got)
	}
}
