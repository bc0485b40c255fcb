package placement

import (
	"testing"
	"testing/synctest"

	"github.com/xce/xce/state"
)

// A worker that went while there was no primary never registers with the
// new one: the committed assignment still names it, and the loop plans
// from that assignment as it is, so the departed worker's copies are lost
// and its actives go to their caught-up standbys (example 2 of
// docs/design.md, "The assignor", with I1 gone).
func TestDepartedWorkerInCommittedAssignment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 1)
		r.submit("T1", "T2", "T3", "T4")
		r.commit(map[string]state.Placement{
			"T1": {Active: "I1", Standbys: []string{"I2"}}, "T2": {Active: "I2", Standbys: []string{"I3"}},
			"T3": {Active: "I3", Standbys: []string{"I1"}}, "T4": {Active: "I1", Standbys: []string{"I2"}},
		})
		defer r.establish(2)()
		r.register("I2", 1)
		r.register("I3", 1)
		lags := map[string]map[string]int64{"I2": {"T2": 0, "T1": 0, "T4": 0}, "I3": {"T3": 0, "T2": 0}}
		for range 8 {
			r.beat("I2", lags["I2"])
			r.beat("I3", lags["I3"])
			settle(sessionTimeout / 4)
		}
		want := map[string]state.Placement{
			"T1": {Active: "I2", Standbys: []string{"I3"}}, "T2": {Active: "I3", Standbys: []string{"I2"}},
			"T3": {Active: "I3", Standbys: []string{"I2"}}, "T4": {Active: "I2", Standbys: []string{"I3"}},
		}
		if _, got := r.fsm.Assignment(); !equalAssignments(got, want) {
			t.Fatalf("after I1 went: %v, want %v", got, want)
		}
	})
}
