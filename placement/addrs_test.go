package placement

import (
	"errors"
	"maps"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// gate is a SetAddrGate answer a test opens and closes.
type gate struct{ open atomic.Bool }

func (g *gate) writable() error {
	if g.open.Load() {
		return nil
	}
	return errors.New("closed")
}

func (r *rig) addrs() map[string]string {
	a, _ := r.fsm.WorkerAddrs()
	return a
}

func (r *rig) registerAt(id, addr string) {
	r.t.Helper()
	if _, err := r.svc.Register(id, 1, addr); err != nil {
		r.t.Fatalf("register %s: %v", id, err)
	}
	r.beat(id, nil)
}

func (r *rig) wantAddrs(what string, want map[string]string) {
	r.t.Helper()
	if got := r.addrs(); !maps.Equal(got, want) {
		r.t.Fatalf("%s: addresses %v, want %v", what, got, want)
	}
}

// The loop writes a worker's address once the gate is open, and again
// when the worker registers with another; none is written while it is
// closed, and none without a gate.
func TestAddrsWrittenOnRegistration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 1)
		defer r.establish(1)()
		r.registerAt("w1", "w1.workers.test:7000")
		r.keepBeating(time.Second, "w1")
		r.wantAddrs("without a gate", map[string]string{})
		g := &gate{}
		r.svc.SetAddrGate(g.writable)
		r.keepBeating(time.Second, "w1")
		r.wantAddrs("gate closed", map[string]string{})
		g.open.Store(true)
		r.keepBeating(time.Second, "w1")
		r.wantAddrs("gate open", map[string]string{"w1": "w1.workers.test:7000"})
		r.registerAt("w1", "w1.workers.test:7001")
		r.registerAt("w2", "w2.workers.test:7000")
		r.registerAt("w3", "")
		r.keepBeating(time.Second, "w1", "w2", "w3")
		r.wantAddrs("registered again", map[string]string{"w1": "w1.workers.test:7001", "w2": "w2.workers.test:7000"})
		// Registering again without an address forgets the old one.
		r.registerAt("w2", "")
		r.keepBeating(time.Second, "w1", "w2", "w3")
		r.wantAddrs("registered without one", map[string]string{"w1": "w1.workers.test:7001"})
	})
}

// A new primary forgets no address merely because the worker has no
// session yet: only a worker that has not registered within a session
// timeout of the term's start is gone for good. One that registers with
// the address the log holds costs no write.
func TestAddrsAtNewTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 1)
		g := &gate{}
		g.open.Store(true)
		r.svc.SetAddrGate(g.writable)
		revoke := r.establish(1)
		r.registerAt("w1", "w1.workers.test:7000")
		r.registerAt("w2", "w2.workers.test:7000")
		settle(time.Second)
		revoke()
		_, ver := r.fsm.WorkerAddrs()

		defer r.establish(2)()
		r.keepBeatingAt(sessionTimeout/2, "w1")
		r.wantAddrs("early in the new term", map[string]string{"w1": "w1.workers.test:7000", "w2": "w2.workers.test:7000"})
		if _, v := r.fsm.WorkerAddrs(); v != ver {
			t.Fatalf("a registration with the logged address was written (version %d, was %d)", v, ver)
		}
		r.keepBeating(sessionTimeout, "w1")
		r.wantAddrs("a session timeout into the term", map[string]string{"w1": "w1.workers.test:7000"})
	})
}

// keepBeatingAt registers the workers again (at their logged address) and
// keeps them beating for d, as workers do when the primary changes.
func (r *rig) keepBeatingAt(d time.Duration, ids ...string) {
	r.t.Helper()
	addrs := r.addrs()
	for _, id := range ids {
		r.registerAt(id, addrs[id])
	}
	r.keepBeating(d, ids...)
}

// A worker whose session expires keeps its address while it is away,
// and loses it when its replace delay ends; without a replace delay it
// loses it at once.
func TestAddrsForgottenOnDeparture(t *testing.T) {
	for _, delay := range []time.Duration{0, replaceDelay} {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, 1, func(c *Config) { c.ReplaceDelay = delay })
			g := &gate{}
			g.open.Store(true)
			r.svc.SetAddrGate(g.writable)
			defer r.establish(1)()
			r.registerAt("w1", "w1.workers.test:7000")
			r.registerAt("w2", "w2.workers.test:7000")
			r.keepBeating(sessionTimeout*2, "w1")
			if delay > 0 {
				r.wantAddrs("away", map[string]string{"w1": "w1.workers.test:7000", "w2": "w2.workers.test:7000"})
				r.keepBeating(delay, "w1")
			}
			r.wantAddrs("gone", map[string]string{"w1": "w1.workers.test:7000"})
		})
	}
}
