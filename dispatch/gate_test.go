package dispatch

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/xce/xce/ha"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

var timings = RetryTimings{Electing: 100 * time.Millisecond, NoQuorum: 150 * time.Millisecond}

// TestGateTable checks every cell of the gate's table (docs/design.md, "The
// gate"): role × class × write quorum
// (× stale for reads).
func TestGateTable(t *testing.T) {
	const (
		serve = "serve"
		nr    = "not_ready"
		hint  = "not_ready+leader"
	)
	roles := []ha.Role{ha.RoleInit, ha.RoleElecting, ha.RoleStandby, ha.RolePrimary}
	classes := []Class{ClassHealth, ClassRead, ClassWrite, ClassFact, ClassAdmin}
	// want[role][class] for (quorum=true, stale=false); exceptions below.
	want := map[ha.Role]map[Class]string{
		ha.RoleInit:     {ClassHealth: serve, ClassRead: nr, ClassWrite: nr, ClassFact: nr, ClassAdmin: nr},
		ha.RoleElecting: {ClassHealth: serve, ClassRead: nr, ClassWrite: nr, ClassFact: nr, ClassAdmin: nr},
		ha.RoleStandby:  {ClassHealth: serve, ClassRead: hint, ClassWrite: hint, ClassFact: hint, ClassAdmin: hint},
		ha.RolePrimary:  {ClassHealth: serve, ClassRead: serve, ClassWrite: serve, ClassFact: serve, ClassAdmin: serve},
	}
	cells := 0
	for _, role := range roles {
		for _, class := range classes {
			for _, quorum := range []bool{true, false} {
				for _, stale := range []bool{false, true} {
					exp := want[role][class]
					switch {
					case role == ha.RolePrimary && !quorum && class != ClassHealth && class != ClassFact:
						exp = nr // PRIMARY without write quorum: only health and facts
					case role == ha.RoleStandby && class == ClassRead && stale:
						exp = serve
					}
					v := &ha.View{Role: role, Term: 7, WriteQuorum: quorum && role == ha.RolePrimary}
					if role == ha.RoleStandby {
						v.LeaderID, v.LeaderAddr = "n2", "127.0.0.1:7102"
					}
					d := Decide(v, class, stale, timings)
					got := serve
					if !d.Serve {
						got = nr
						if strings.Contains(d.Reason, "primary is n2 at 127.0.0.1:7102") {
							got = hint
						}
						if d.Reason == "" || d.Kind == "" {
							t.Errorf("%s/%s: a refusal without reason or kind", role, class)
						}
					}
					if got != exp {
						t.Errorf("role %s class %s quorum %v stale %v: %s, want %s (%q)", role, class, quorum, stale, got, exp, d.Reason)
					}
					cells++
				}
			}
		}
	}
	if cells != 4*5*2*2 {
		t.Fatalf("checked %d cells", cells)
	}
}

func TestGateReasonsAndRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		v          ha.View
		class      Class
		reason     string
		retryAfter time.Duration
	}{
		{ha.View{Role: ha.RoleElecting}, ClassWrite, "electing", timings.Electing},
		{ha.View{Role: ha.RoleElecting, QuorumLost: true}, ClassWrite, "no write quorum", timings.NoQuorum},
		{ha.View{Role: ha.RoleElecting, Storage: "no space left on device"}, ClassWrite, "storage failing: no space left on device", timings.Electing},
		{ha.View{Role: ha.RoleInit}, ClassRead, "starting", timings.Electing},
		{ha.View{Role: ha.RolePrimary}, ClassWrite, "no write quorum", timings.NoQuorum},
		{ha.View{Role: ha.RoleStandby, LeaderID: "n2", LeaderAddr: "127.0.0.1:7102"}, ClassWrite, "standby: primary is n2 at 127.0.0.1:7102", 0},
		{ha.View{Role: ha.RoleStandby}, ClassWrite, "standby: primary unknown", timings.Electing},
		{ha.View{Role: ha.RolePrimary, WriteQuorum: true, Stopping: true}, ClassWrite, "shutting down", timings.Electing},
	} {
		d := Decide(&tc.v, tc.class, false, timings)
		if d.Serve || d.Reason != tc.reason || d.RetryAfter != tc.retryAfter {
			t.Errorf("%+v %s: %+v, want reason %q retry %v", tc.v, tc.class, d, tc.reason, tc.retryAfter)
		}
	}
	// Health is served even while stopping.
	if d := Decide(&ha.View{Stopping: true}, ClassHealth, false, timings); !d.Serve {
		t.Error("health refused while stopping")
	}
}

// TestEveryMethodHasOneClass fails when a method is added to the API
// without a class.
func TestEveryMethodHasOneClass(t *testing.T) {
	sd := xcev1.File_xce_v1_xce_proto.Services()
	n := 0
	for i := 0; i < sd.Len(); i++ {
		s := sd.Get(i)
		for j := 0; j < s.Methods().Len(); j++ {
			m := s.Methods().Get(j)
			proc := fmt.Sprintf("/%s/%s", s.FullName(), m.Name())
			if _, ok := Methods[proc]; !ok {
				t.Errorf("%s has no class in dispatch.Methods", proc)
			}
			n++
		}
	}
	if n != len(Methods) {
		t.Errorf("Methods declares %d procedures, the API has %d", len(Methods), n)
	}
}

func TestValidTaskID(t *testing.T) {
	for _, ok := range []string{"a", "T-1", "x.y_z", strings.Repeat("a", 128)} {
		if !ValidTaskID(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", "a b", "a/b", "../x", strings.Repeat("a", 129), "é", "a\n"} {
		if ValidTaskID(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestHolds: the gate holds a refused request only while no primary is
// known and nothing else refuses it.
func TestHolds(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    ha.View
		want bool
	}{
		{"starting", ha.View{Role: ha.RoleInit}, true},
		{"electing", ha.View{Role: ha.RoleElecting, Term: 3}, true},
		{"electing without quorum", ha.View{Role: ha.RoleElecting, Term: 3, QuorumLost: true}, true},
		{"standby, primary unknown", ha.View{Role: ha.RoleStandby, Term: 3}, true},
		{"standby, primary known", ha.View{Role: ha.RoleStandby, Term: 3, LeaderID: "n2", LeaderAddr: "127.0.0.1:7102"}, false},
		{"primary without quorum", ha.View{Role: ha.RolePrimary, Term: 3, LeaderID: "n1", LeaderAddr: "127.0.0.1:7101"}, false},
		{"stopping", ha.View{Role: ha.RoleInit, Stopping: true}, false},
		{"storage failing", ha.View{Role: ha.RoleElecting, Storage: "disk full"}, false},
	} {
		d := Decide(&tc.v, ClassWrite, false, timings)
		if got := Holds(&tc.v, d); got != tc.want {
			t.Errorf("%s: Holds = %v, want %v (decision %+v)", tc.name, got, tc.want, d)
		}
	}
	if served := (ha.View{Role: ha.RolePrimary, Term: 3, LeaderID: "n1", LeaderAddr: "127.0.0.1:7101", WriteQuorum: true}); Holds(&served, Decide(&served, ClassWrite, false, timings)) {
		t.Error("a served request held")
	}
	if v := (ha.View{Role: ha.RoleInit}); Holds(&v, Decide(&v, ClassHealth, false, timings)) {
		t.Error("a health request held")
	}
}
