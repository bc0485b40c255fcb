package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xce/xce/client"
)

func TestPrefillID(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		i      int64
		want   string
	}{
		{"p1a2b", 0, "p1a2b-0"},
		{"p1a2b", 1999, "p1a2b-1999"},
		{"p", 1 << 40, "p-1099511627776"},
	} {
		if got := PrefillID(tc.prefix, tc.i); got != tc.want {
			t.Errorf("PrefillID(%q, %d) = %q, want %q", tc.prefix, tc.i, got, tc.want)
		}
	}
	// The measured run's ids start with "b": no prefill id can be one.
	if strings.HasPrefix(PrefillID("p0", 7), "b") {
		t.Error("a prefill id starts like a measured run's")
	}
}

// attempt is one call the prefill made.
type attempt struct{ id, requestID string }

// registry answers the prefill's calls: fail maps an id to the errors of
// its first attempts, in order; an attempt past them succeeds.
type registry struct {
	mu       sync.Mutex
	fail     map[string][]error
	attempts []attempt
	created  map[string]int
}

func (r *registry) submit(_ context.Context, _ int, id, requestID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = append(r.attempts, attempt{id, requestID})
	if errs := r.fail[id]; len(errs) > 0 {
		r.fail[id] = errs[1:]
		if errs[0] == nil { // applied, but the answer was lost
			r.created[id]++
			return context.DeadlineExceeded
		}
		return errs[0]
	}
	if r.created[id] > 0 {
		return fmt.Errorf("%w: %s", client.ErrAlreadyExists, id)
	}
	r.created[id]++
	return nil
}

// The prefill creates each of its ids once, retrying an attempt that got
// no answer with the same request id, counting a retried id found already
// there as created, and counting every failed attempt; a refusal no retry
// cures ends it with an error.
func TestPrefillAccounting(t *testing.T) {
	notReady := &client.NotReadyError{}
	for _, tc := range []struct {
		name      string
		tasks     int
		clients   int
		fail      map[string][]error
		wantErrs  int64
		wantFatal string
	}{
		{name: "none", tasks: 0, clients: 4},
		{name: "fewer tasks than clients", tasks: 3, clients: 256},
		{name: "all acknowledged", tasks: 1000, clients: 16},
		{name: "not ready and lost answers retried", tasks: 100, clients: 8, wantErrs: 4,
			fail: map[string][]error{"p-0": {notReady, notReady}, "p-50": {nil}, "p-99": {errors.New("connection reset")}}},
		{name: "permission denied ends it", tasks: 100, clients: 8, wantFatal: "PermissionDenied",
			fail: map[string][]error{"p-10": {fmt.Errorf("%w: tasks.write", client.ErrPermissionDenied)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &registry{fail: tc.fail, created: map[string]int{}}
			if r.fail == nil {
				r.fail = map[string][]error{}
			}
			res, err := RunPrefill(context.Background(), Prefill{Tasks: tc.tasks, Clients: tc.clients, Prefix: "p", submit: r.submit})
			if tc.wantFatal != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantFatal) {
					t.Fatalf("err %v, want one naming %s", err, tc.wantFatal)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Tasks != int64(tc.tasks) || res.Errors != tc.wantErrs {
				t.Errorf("tasks %d errors %d, want %d and %d", res.Tasks, res.Errors, tc.tasks, tc.wantErrs)
			}
			if len(r.created) != tc.tasks {
				t.Errorf("%d ids created, want %d", len(r.created), tc.tasks)
			}
			for i := range tc.tasks {
				if id := PrefillID("p", int64(i)); r.created[id] != 1 {
					t.Errorf("%s created %d times", id, r.created[id])
				}
			}
			for _, a := range r.attempts {
				if a.requestID != a.id {
					t.Errorf("attempt of %s with request id %s", a.id, a.requestID)
				}
			}
		})
	}
}

// Bad options are refused before any call.
func TestPrefillOptions(t *testing.T) {
	r := &registry{created: map[string]int{}}
	for _, p := range []Prefill{{Tasks: -1, Clients: 1}, {Tasks: 10, Clients: 0}} {
		p.submit = r.submit
		if _, err := RunPrefill(context.Background(), p); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
	if len(r.attempts) != 0 {
		t.Errorf("%d calls made", len(r.attempts))
	}
}

// Progress comes once a second with the running count; ending ctx stops
// the prefill with what is in.
func TestPrefillProgressAndStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var got []Progress
		var calls int64
		slow := func(ctx context.Context, _ int, _, _ string) error {
			calls++
			if calls == 400 {
				cancel()
				return ctx.Err()
			}
			time.Sleep(7 * time.Millisecond) // fake time: each submit takes 7 ms
			return nil
		}
		res, err := RunPrefill(ctx, Prefill{Tasks: 1000, Clients: 1, Prefix: "p", submit: slow,
			Progress: func(p Progress) { got = append(got, p) }})
		if err != nil {
			t.Fatal(err)
		}
		if res.Tasks != 399 || res.Errors != 0 {
			t.Errorf("stopped with %d tasks, %d errors; want 399 and 0", res.Tasks, res.Errors)
		}
		if len(got) != 2 {
			t.Fatalf("progress %+v, want two", got)
		}
		for i, p := range got {
			// A task takes 7 ms: 142 are in after one second, 285 after two.
			if want := []int64{142, 285}[i]; p.Elapsed != time.Duration(i+1)*time.Second || p.Ops != want {
				t.Errorf("progress %d: %+v, want %ds and %d tasks", i, p, i+1, want)
			}
		}
	})
}
