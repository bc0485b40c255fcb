package ha

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

func types(fx []Effect) []string {
	var out []string
	for _, f := range fx {
		switch f := f.(type) {
		case RoleChanged:
			out = append(out, fmt.Sprintf("role %s->%s", f.From, f.To))
		case BeginTerm:
			out = append(out, fmt.Sprintf("begin %d", f.Term))
		case EndTerm:
			out = append(out, "end")
		case Establish:
			out = append(out, fmt.Sprintf("establish %d", f.Term))
		case Revoke:
			out = append(out, "revoke")
		case FirstDecision:
			out = append(out, "phase2 "+f.Role.String())
		case TransferLeadership:
			out = append(out, "transfer")
		}
	}
	return out
}

// step is one line of a scenario: an event and the effects it must produce.
type step struct {
	ev   Event
	want []string
	role Role
}

func run(t *testing.T, steps []step) {
	t.Helper()
	m := NewMachine("n1")
	for i, s := range steps {
		got := types(m.Step(s.ev))
		if !reflect.DeepEqual(got, s.want) && !(len(got) == 0 && len(s.want) == 0) {
			t.Fatalf("step %d %#v: effects %q, want %q", i, s.ev, got, s.want)
		}
		if m.Role() != s.role {
			t.Fatalf("step %d %#v: role %s, want %s", i, s.ev, m.Role(), s.role)
		}
	}
}

func TestLeaderBecomesPrimaryOnlyAfterBarrier(t *testing.T) {
	run(t, []step{
		{Started{}, []string{"role INIT->ELECTING"}, RoleElecting},
		{Observed{State: StateCandidate, Term: 2}, nil, RoleElecting},
		{Observed{State: StateLeader, Term: 2, LeaderID: "n1"}, []string{"begin 2"}, RoleElecting},
		{Observed{State: StateLeader, Term: 2, LeaderID: "n1"}, nil, RoleElecting}, // barrier under way: nothing new
		{BarrierDone{Term: 2}, []string{"establish 2", "role ELECTING->PRIMARY", "phase2 PRIMARY"}, RolePrimary},
		{Observed{State: StateLeader, Term: 2, LeaderID: "n1"}, nil, RolePrimary},
	})
}

func TestFollowerWithLeaderIsStandby(t *testing.T) {
	run(t, []step{
		{Started{}, []string{"role INIT->ELECTING"}, RoleElecting},
		{Observed{State: StateFollower, Term: 3, LeaderID: "n2"}, []string{"role ELECTING->STANDBY", "phase2 STANDBY"}, RoleStandby},
		{Observed{State: StateFollower, Term: 4}, []string{"role STANDBY->ELECTING"}, RoleElecting},
		// phase 2 runs once per process, not on every decision
		{Observed{State: StateFollower, Term: 4, LeaderID: "n3"}, []string{"role ELECTING->STANDBY"}, RoleStandby},
	})
}

func TestLostAndRegainedLeadershipRevokesAndBeginsNewTerm(t *testing.T) {
	run(t, []step{
		{Started{}, []string{"role INIT->ELECTING"}, RoleElecting},
		{Observed{State: StateLeader, Term: 2}, []string{"begin 2"}, RoleElecting},
		{BarrierDone{Term: 2}, []string{"establish 2", "role ELECTING->PRIMARY", "phase2 PRIMARY"}, RolePrimary},
		// The follower phase was missed: leader again, in a newer term.
		{Observed{State: StateLeader, Term: 4}, []string{"revoke", "end", "begin 4", "role PRIMARY->ELECTING"}, RoleElecting},
		{BarrierDone{Term: 2}, nil, RoleElecting}, // stale barrier ignored
		{BarrierDone{Term: 4}, []string{"establish 4", "role ELECTING->PRIMARY"}, RolePrimary},
	})
}

func TestLeavingPrimaryRevokes(t *testing.T) {
	run(t, []step{
		{Started{}, []string{"role INIT->ELECTING"}, RoleElecting},
		{Observed{State: StateLeader, Term: 2}, []string{"begin 2"}, RoleElecting},
		{BarrierDone{Term: 2}, []string{"establish 2", "role ELECTING->PRIMARY", "phase2 PRIMARY"}, RolePrimary},
		{Observed{State: StateFollower, Term: 3, LeaderID: "n2"}, []string{"revoke", "end", "role PRIMARY->STANDBY"}, RoleStandby},
	})
}

func TestLeadershipLostDuringBarrier(t *testing.T) {
	run(t, []step{
		{Started{}, []string{"role INIT->ELECTING"}, RoleElecting},
		{Observed{State: StateLeader, Term: 2}, []string{"begin 2"}, RoleElecting},
		{Observed{State: StateCandidate, Term: 3}, []string{"end"}, RoleElecting},
		{BarrierDone{Term: 2}, nil, RoleElecting},
	})
}

func TestBarrierFailureHandsLeadershipOnAndRetries(t *testing.T) {
	run(t, []step{
		{Started{}, []string{"role INIT->ELECTING"}, RoleElecting},
		{Observed{State: StateLeader, Term: 2}, []string{"begin 2"}, RoleElecting},
		{BarrierDone{Term: 2, Err: errors.New("timeout")}, []string{"end", "transfer"}, RoleElecting},
		// still leader on the next look: try the term again
		{Observed{State: StateLeader, Term: 2}, []string{"begin 2"}, RoleElecting},
	})
}

func TestFencedLeavesPrimaryForTheTerm(t *testing.T) {
	run(t, []step{
		{Started{}, []string{"role INIT->ELECTING"}, RoleElecting},
		{Observed{State: StateLeader, Term: 5}, []string{"begin 5"}, RoleElecting},
		{BarrierDone{Term: 5}, []string{"establish 5", "role ELECTING->PRIMARY", "phase2 PRIMARY"}, RolePrimary},
		{Fenced{Term: 5, Reason: "epoch"}, []string{"revoke", "end", "transfer", "role PRIMARY->ELECTING"}, RoleElecting},
		// raft still says leader in term 5: the node does not become PRIMARY again
		{Observed{State: StateLeader, Term: 5}, nil, RoleElecting},
		// the transfer failed: it is asked again while the node still leads term 5
		{TransferDone{Err: errors.New("no peer")}, nil, RoleElecting},
		{Observed{State: StateLeader, Term: 5}, []string{"transfer"}, RoleElecting},
		{Observed{State: StateLeader, Term: 5}, nil, RoleElecting},
		{Observed{State: StateLeader, Term: 6}, []string{"begin 6"}, RoleElecting},
	})
}

func TestStoppingRevokesAndIgnoresLaterEvents(t *testing.T) {
	run(t, []step{
		{Started{}, []string{"role INIT->ELECTING"}, RoleElecting},
		{Observed{State: StateLeader, Term: 2}, []string{"begin 2"}, RoleElecting},
		{BarrierDone{Term: 2}, []string{"establish 2", "role ELECTING->PRIMARY", "phase2 PRIMARY"}, RolePrimary},
		{Stopping{}, []string{"revoke", "end"}, RolePrimary},
		{Observed{State: StateFollower, Term: 3, LeaderID: "n2"}, nil, RolePrimary},
	})
}

func TestObservedBeforeStartedLeavesInit(t *testing.T) {
	run(t, []step{
		{Observed{State: StateFollower, Term: 1, LeaderID: "n2"}, []string{"role INIT->ELECTING", "role ELECTING->STANDBY", "phase2 STANDBY"}, RoleStandby},
	})
}

func TestQuorum(t *testing.T) {
	t0 := time.Unix(1000, 0)
	q := NewQuorum("n1", []string{"n1", "n2", "n3"}, 100*time.Millisecond)
	q.Reset(t0)
	if ok, next := q.Has(t0); !ok || !next.IsZero() {
		t.Fatalf("fresh: %v %v", ok, next)
	}
	q.Failed("n2", t0.Add(10*time.Millisecond))
	if ok, _ := q.Has(t0.Add(50 * time.Millisecond)); !ok {
		t.Fatal("one peer failing is still a quorum of three")
	}
	q.Failed("n3", t0.Add(20*time.Millisecond))
	ok, next := q.Has(t0.Add(50 * time.Millisecond))
	if !ok || !next.Equal(t0.Add(110*time.Millisecond)) {
		t.Fatalf("within window: %v next %v", ok, next)
	}
	if ok, _ := q.Has(t0.Add(119 * time.Millisecond)); !ok {
		t.Fatal("n3 still within its window")
	}
	if ok, _ := q.Has(t0.Add(120 * time.Millisecond)); ok {
		t.Fatal("both peers past the window: no quorum")
	}
	q.Resumed("n3", t0.Add(200*time.Millisecond))
	if ok, _ := q.Has(t0.Add(201 * time.Millisecond)); !ok {
		t.Fatal("resumed peer restores the quorum")
	}
	single := NewQuorum("n1", []string{"n1"}, time.Millisecond)
	if ok, _ := single.Has(t0); !ok {
		t.Fatal("a single voter is its own quorum")
	}
}

func TestStorageFailingPrimaryHandsLeadershipOn(t *testing.T) {
	run(t, []step{
		{Started{}, []string{"role INIT->ELECTING"}, RoleElecting},
		{Observed{State: StateLeader, Term: 2}, []string{"begin 2"}, RoleElecting},
		{BarrierDone{Term: 2}, []string{"establish 2", "role ELECTING->PRIMARY", "phase2 PRIMARY"}, RolePrimary},
		{StorageFailing{Reason: "no space left on device"}, []string{"revoke", "end", "transfer", "role PRIMARY->ELECTING"}, RoleElecting},
		// still leading: asked once, not at every look
		{Observed{State: StateLeader, Term: 2}, nil, RoleElecting},
		{TransferDone{Err: errors.New("no peer")}, nil, RoleElecting},
		{Observed{State: StateLeader, Term: 2}, []string{"transfer"}, RoleElecting},
		// another node took over
		{Observed{State: StateFollower, Term: 3, LeaderID: "n2"}, []string{"role ELECTING->STANDBY"}, RoleStandby},
		{StorageFailing{}, nil, RoleStandby},
		// healthy again: the node may lead and serve
		{Observed{State: StateLeader, Term: 4}, []string{"begin 4", "role STANDBY->ELECTING"}, RoleElecting},
		{BarrierDone{Term: 4}, []string{"establish 4", "role ELECTING->PRIMARY"}, RolePrimary},
	})
}

func TestStorageFailingSingleNodeWaitsAndResumes(t *testing.T) {
	m := NewMachine("n1")
	m.Step(Started{})
	m.Step(Observed{State: StateLeader, Term: 2})
	m.Step(BarrierDone{Term: 2})
	got := types(m.Step(StorageFailing{Reason: "no space left on device"}))
	if want := []string{"revoke", "end", "transfer", "role PRIMARY->ELECTING"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("effects %q, want %q", got, want)
	}
	// raft stepped down after the failed write, and does not campaign
	if got := types(m.Step(Observed{State: StateFollower, Term: 2})); len(got) != 0 || m.Role() != RoleElecting {
		t.Fatalf("role %s effects %q", m.Role(), got)
	}
	if want := "storage failing: no space left on device; not campaigning until a write succeeds"; m.Reason() != want {
		t.Fatalf("reason %q, want %q", m.Reason(), want)
	}
	// the failure clears: the reason says electing again
	m.Step(StorageFailing{})
	if m.Reason() != "electing" {
		t.Fatalf("reason after recovery %q", m.Reason())
	}
	if fx := types(m.Step(Observed{State: StateLeader, Term: 3})); !reflect.DeepEqual(fx, []string{"begin 3"}) {
		t.Fatalf("effects %q", fx)
	}
}

func TestStorageFailingStandbyKeepsFollowingAndSaysWhy(t *testing.T) {
	m := NewMachine("n1")
	m.Step(Started{})
	m.Step(Observed{State: StateFollower, Term: 2, LeaderID: "n2"})
	if fx := types(m.Step(StorageFailing{Reason: "disk I/O error"})); len(fx) != 0 || m.Role() != RoleStandby {
		t.Fatalf("effects %q role %s", fx, m.Role())
	}
	if want := "following n2; storage failing: disk I/O error"; m.Reason() != want {
		t.Fatalf("reason %q, want %q", m.Reason(), want)
	}
	m.Step(StorageFailing{})
	if m.Reason() != "following n2" {
		t.Fatalf("reason %q", m.Reason())
	}
}
