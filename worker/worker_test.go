package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/xce/xce/client"
	"github.com/xce/xce/internal/backoff"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// fakeController is an in-process WorkerService: it keeps sessions,
// records every heartbeat with its (fake) time, and answers with the copies
// the test sets. Calls reach it through handlerTransport, without sockets,
// so that the worker runs inside a synctest bubble on fake time.
type fakeController struct {
	xcev1connect.UnimplementedWorkerServiceHandler

	start time.Time

	mu        sync.Mutex
	sessions  map[string]bool
	registers int
	// labels are those of the last registration.
	labels     map[string]string
	heartbeats []heartbeat
	copies     xcev1.HeartbeatResponse
	intervalMs uint32
	// notReady refuses calls with NOT_READY while it is > 0 (decremented).
	notReady int
	// delay is how long a heartbeat takes to answer (fake time); a caller
	// that gives up meanwhile gets no answer.
	delay time.Duration
	// maxWaitMs is RegisterResponse.max_wait_ms: a heartbeat with wait_ms
	// whose acknowledged_seq got the answer it would get now is held until
	// that answer changes (answer, assign) or wait_ms passes, as a primary
	// holds it.
	maxWaitMs uint32
	// changed is closed, and replaced, whenever the answer changes.
	changed chan struct{}
	// answered is the last answer and the seq it went to (0: none in
	// this session).
	answered    *xcev1.HeartbeatResponse
	answeredSeq uint64
	// leaves says when a leaving worker gets left.
	leaves leavePolicy
	// storm: more than stormBeats heartbeats came at one fake instant;
	// each one from then on takes 10ms.
	storm bool
	// logs collects the worker's log.
	logs testutil.SyncBuffer
}

// leavePolicy says when the fakeController ends a leaving worker's
// session (HeartbeatResponse.left).
type leavePolicy int

const (
	// leftAsPrimary: as a primary does, once the worker leaves now, or
	// runs no active and the answer assigns it none.
	leftAsPrimary leavePolicy = iota
	// leftNever: the answers never say left.
	leftNever
	// leftHang: a heartbeat that leaves now gets no answer at all, as
	// from a primary that went away.
	leftHang
)

// heartbeat is one heartbeat the fakeController received, and what became
// of it.
type heartbeat struct {
	at  time.Duration // since the controller started
	req *xcev1.HeartbeatRequest
	// end is when it was answered, refused or given up.
	end time.Duration
	// abandoned: the worker gave up on it before its answer; refused:
	// the controller refused it (a failover ended its session).
	abandoned, refused bool
	// answered: it got an answer; left: that answer said left.
	answered, left bool
}

// String shows a heartbeat as "at #seq ack=N wait=N run=a,b" and its
// flags, and its fate unless it was answered.
func (hb heartbeat) String() string {
	r := hb.req
	s := fmt.Sprintf("%v #%d ack=%d wait=%d run=%s", hb.at, r.Seq, r.AcknowledgedSeq, r.WaitMs, strings.Join(r.Running, ","))
	inFlight := !hb.answered && !hb.abandoned && !hb.refused
	for _, f := range []struct {
		on   bool
		name string
	}{{r.Leaving, "leaving"}, {r.LeaveNow, "leave_now"}, {hb.abandoned, "abandoned"}, {hb.refused, "refused"},
		{hb.left, "left"}, {inFlight, "in-flight"}} {
		if f.on {
			s += " " + f.name
		}
	}
	return s
}

func newFakeController(intervalMs uint32) *fakeController {
	return &fakeController{start: time.Now(), sessions: map[string]bool{}, intervalMs: intervalMs, changed: make(chan struct{})}
}

// newHoldingController is a fakeController that holds heartbeats for up to
// maxWaitMs and hands a leaving worker's actives over.
func newHoldingController(intervalMs, maxWaitMs uint32) *fakeController {
	f := newFakeController(intervalMs)
	f.maxWaitMs = maxWaitMs
	return f
}

// notify wakes the heartbeats held (under f.mu).
func (f *fakeController) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeController) refuse() error {
	if f.notReady <= 0 {
		return nil
	}
	f.notReady--
	e := connect.NewError(connect.CodeUnavailable, errors.New("electing"))
	d, _ := connect.NewErrorDetail(&xcev1.NotReady{Role: xcev1.Role_ROLE_ELECTING, Reason: "electing", RetryAfterMs: 100})
	e.AddDetail(d)
	return e
}

func (f *fakeController) Register(_ context.Context, req *connect.Request[xcev1.RegisterRequest]) (*connect.Response[xcev1.RegisterResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.refuse(); err != nil {
		return nil, err
	}
	if req.Msg.Capacity > 1000 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("capacity exceeds the maximum"))
	}
	if req.Msg.WorkerId == "intruder" {
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("worker w1 may not register as intruder"))
	}
	f.sessions[req.Msg.WorkerId] = true
	f.registers++
	f.labels = req.Msg.Labels
	f.answered, f.answeredSeq = nil, 0
	f.notify() // a heartbeat held for the previous session ends
	return connect.NewResponse(&xcev1.RegisterResponse{Generation: f.copies.Generation, SessionTimeoutMs: 10 * f.intervalMs,
		HeartbeatIntervalMs: f.intervalMs, MaxWaitMs: f.maxWaitMs}), nil
}

func (f *fakeController) Heartbeat(ctx context.Context, req *connect.Request[xcev1.HeartbeatRequest]) (*connect.Response[xcev1.HeartbeatResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.refuse(); err != nil {
		return nil, err
	}
	m := req.Msg
	if !f.sessions[m.WorkerId] {
		return nil, errUnknownWorker
	}
	now := time.Since(f.start)
	f.heartbeats = append(f.heartbeats, heartbeat{at: now, req: proto.CloneOf(m)})
	i := len(f.heartbeats) - 1
	if f.storm = f.storm || f.sameInstant(now) > stormBeats; f.storm {
		// A worker that heartbeats without pause would hold fake time
		// still forever: let time pass (checkBeats fails the test).
		f.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		f.mu.Lock()
	}
	resp, err := f.respond(ctx, m)
	hb := &f.heartbeats[i]
	hb.end = time.Since(f.start)
	switch {
	case ctx.Err() != nil:
		hb.abandoned = true
		return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
	case err != nil:
		hb.refused = true
		return nil, err
	}
	hb.answered, hb.left = true, resp.Left
	if m.Seq != 0 {
		f.answered, f.answeredSeq = proto.CloneOf(resp), m.Seq
	}
	return connect.NewResponse(resp), nil
}

var errUnknownWorker = connect.NewError(connect.CodeFailedPrecondition, errors.New("unknown worker: register again"))

// stormBeats is how many heartbeats at one fake instant make a storm.
const stormBeats = 50

// sameInstant counts the heartbeats received at fake time at (under f.mu).
func (f *fakeController) sameInstant(at time.Duration) int {
	n := 0
	for k := len(f.heartbeats) - 1; k >= 0 && f.heartbeats[k].at == at; k-- {
		n++
	}
	return n
}

// respond answers heartbeat m (under f.mu, which it releases while it
// waits): after the delay, from the state then; left for a leaving worker
// that may leave; held while the answer is the one acknowledged_seq got.
// A heartbeat whose caller gave up gets no answer (ctx.Err()).
func (f *fakeController) respond(ctx context.Context, m *xcev1.HeartbeatRequest) (*xcev1.HeartbeatResponse, error) {
	if f.delay > 0 && !f.pause(ctx, f.delay) {
		return nil, ctx.Err()
	}
	if !f.sessions[m.WorkerId] {
		return nil, errUnknownWorker
	}
	if m.LeaveNow && f.leaves == leftHang {
		f.mu.Unlock()
		<-ctx.Done()
		f.mu.Lock()
		return nil, ctx.Err()
	}
	if m.Leaving && f.leaves == leftAsPrimary &&
		(m.LeaveNow || len(m.Running) == 0 && len(f.copies.Actives)+len(f.copies.PendingActives) == 0) {
		delete(f.sessions, m.WorkerId)
		return &xcev1.HeartbeatResponse{Generation: f.copies.Generation, Left: true}, nil
	}
	r := f.response()
	if m.WaitMs == 0 || f.maxWaitMs == 0 || m.AcknowledgedSeq == 0 || m.AcknowledgedSeq != f.answeredSeq {
		return r, nil
	}
	deadline := time.Now().Add(time.Duration(min(m.WaitMs, f.maxWaitMs)) * time.Millisecond)
	for proto.Equal(r, f.answered) {
		if !f.waitFor(ctx, deadline) {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			break
		}
		if !f.sessions[m.WorkerId] {
			return nil, errUnknownWorker // a failover ended the hold
		}
		r = f.response()
	}
	return r, nil
}

// response is the answer the copies the test set make now (under f.mu).
func (f *fakeController) response() *xcev1.HeartbeatResponse {
	r := proto.CloneOf(&f.copies)
	r.HeartbeatIntervalMs = f.intervalMs
	return r
}

// pause releases f.mu for d, or until ctx ends (false).
func (f *fakeController) pause(ctx context.Context, d time.Duration) bool {
	f.mu.Unlock()
	defer f.mu.Lock()
	return backoff.Sleep(ctx, d)
}

// waitFor releases f.mu until the answer changes (true), deadline passes
// or ctx ends (false).
func (f *fakeController) waitFor(ctx context.Context, deadline time.Time) bool {
	changed := f.changed
	f.mu.Unlock()
	defer f.mu.Lock()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-changed:
		return time.Now().Before(deadline)
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// assign sets the copies the next heartbeats get.
func (f *fakeController) assign(gen uint64, actives, standbys, warmups []string) {
	f.mu.Lock()
	f.copies = xcev1.HeartbeatResponse{Generation: gen, Actives: actives, Standbys: standbys, Warmups: warmups}
	f.notify()
	f.mu.Unlock()
}

// answer sets the whole answer of the next heartbeats.
func (f *fakeController) answer(r *xcev1.HeartbeatResponse) {
	f.mu.Lock()
	f.copies = *proto.CloneOf(r)
	f.notify()
	f.mu.Unlock()
}

// setNotReady makes the next n calls fail with NOT_READY.
func (f *fakeController) setNotReady(n int) {
	f.mu.Lock()
	f.notReady = n
	f.mu.Unlock()
}

// all returns every heartbeat so far.
func (f *fakeController) all() []heartbeat {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.heartbeats)
}

// failover forgets every session, as a new primary would.
func (f *fakeController) failover() {
	f.mu.Lock()
	clear(f.sessions)
	f.answered, f.answeredSeq = nil, 0
	f.notify()
	f.mu.Unlock()
}

// last returns the last heartbeat and how many there were.
func (f *fakeController) last(t *testing.T) (heartbeat, int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.heartbeats) == 0 {
		t.Fatal("no heartbeat yet")
	}
	return f.heartbeats[len(f.heartbeats)-1], len(f.heartbeats)
}

func (f *fakeController) registered() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.registers
}

func (f *fakeController) httpClient() *http.Client {
	mux := http.NewServeMux()
	mux.Handle(xcev1connect.NewWorkerServiceHandler(f))
	return &http.Client{Transport: handlerTransport{mux}}
}

// handlerTransport serves a request in-process (unary calls only).
type handlerTransport struct{ h http.Handler }

func (tr handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	tr.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

func factsOf(req *xcev1.HeartbeatRequest) []string {
	var out []string
	for _, f := range req.Facts {
		s := strings.TrimPrefix(f.Kind.String(), "FACT_KIND_")
		if f.TaskId != "" {
			s += " " + f.TaskId
		}
		out = append(out, s+": "+f.Text)
	}
	return out
}

func wantHeartbeat(t *testing.T, f *fakeController, at time.Duration, lags map[string]int64, facts ...string) {
	t.Helper()
	hb, _ := f.last(t)
	if hb.at != at {
		t.Errorf("last heartbeat at %v, want %v", hb.at, at)
	}
	got := hb.req.Lags
	if got == nil {
		got = map[string]int64{}
	}
	if !maps.Equal(got, lags) {
		t.Errorf("heartbeat at %v: lags %v, want %v", hb.at, got, lags)
	}
	if g := factsOf(hb.req); strings.Join(g, "|") != strings.Join(facts, "|") {
		t.Errorf("heartbeat at %v: facts %q, want %q", hb.at, g, facts)
	}
}

func startWorker(t *testing.T, f *fakeController, cfg Config, simCfg SimulatorConfig) (cancel func() error) {
	t.Helper()
	sim, err := NewSimulator(simCfg)
	if err != nil {
		t.Fatal(err)
	}
	return startHandler(t, f, cfg, sim)
}

// startHandler runs a worker with handler h against f until the returned
// function is called; that returns what Run returned.
func startHandler(t *testing.T, f *fakeController, cfg Config, h Handler) (cancel func() error) {
	t.Helper()
	r := runHandler(t, f, cfg, h)
	return func() error {
		r.cancel()
		return r.wait()
	}
}

// workerRun is a worker's Run in a goroutine of its own.
type workerRun struct {
	cancel context.CancelFunc // ends Run's context
	done   chan struct{}      // closed once Run returned
	err    error              // what Run returned (read after done)
	at     time.Duration      // when, since the controller started
}

// wait waits for Run to return and returns what it returned.
func (r *workerRun) wait() error {
	<-r.done
	return r.err
}

// returned reports whether Run has returned.
func (r *workerRun) returned() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// testLog writes each log line to the test's output.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// runHandler runs a worker with handler h against f until its context is
// cancelled (workerRun.cancel).
func runHandler(t *testing.T, f *fakeController, cfg Config, h Handler) *workerRun {
	t.Helper()
	cfg.Controllers = []string{"controller:1"}
	cfg.HTTPClient = f.httpClient()
	var out io.Writer = &f.logs
	if testing.Verbose() {
		out = io.MultiWriter(&f.logs, testLog{t})
	}
	cfg.Logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w, err := New(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &workerRun{cancel: stop, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = w.Run(ctx)
		r.at = time.Since(f.start)
	}()
	t.Cleanup(func() { // a failed test stops it too
		stop()
		<-r.done
	})
	return r
}

// TestRunHeartbeatsAndSimulates drives a worker on fake time: it registers,
// heartbeats at the controller's interval, restores what it is given at the
// restore rate, reports facts once per session, registers again after a
// failover, and lets go of the state of a task it lost.
func TestRunHeartbeatsAndSimulates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const step = 500 * time.Millisecond
		f := newFakeController(500)
		stop := startWorker(t, f, Config{ID: "w1", Capacity: 2}, SimulatorConfig{RestoreRate: 20_000, DropLag: 30_000})
		synctest.Wait()
		if f.registered() != 1 {
			t.Fatalf("%d registrations", f.registered())
		}
		// First heartbeat at once: no state, no actives.
		wantHeartbeat(t, f, 0, map[string]int64{}, "NOTIFY: no actives")

		// The controller places a (active) and w (warm-up): both start at
		// the initial lag and fall at 20000/s.
		f.assign(1, []string{"a"}, nil, []string{"w"})
		time.Sleep(step)
		synctest.Wait()
		wantHeartbeat(t, f, step, map[string]int64{})
		time.Sleep(step)
		synctest.Wait()
		wantHeartbeat(t, f, 2*step, map[string]int64{"a": 40_000, "w": 40_000}, "NOTIFY: actives: a", "UPDATE a: restoring")
		time.Sleep(step)
		synctest.Wait()
		// Facts the controller has are not sent again.
		wantHeartbeat(t, f, 3*step, map[string]int64{"a": 30_000, "w": 30_000})
		time.Sleep(3 * step)
		synctest.Wait()
		// Assigned at 1×step, 50000 at 20000/s: caught up at 6×step.
		wantHeartbeat(t, f, 6*step, map[string]int64{"a": 0, "w": 0}, "UPDATE a: running")
		time.Sleep(step)
		synctest.Wait()
		wantHeartbeat(t, f, 7*step, map[string]int64{"a": 0, "w": 0})
		_, n := f.last(t)
		if n != 8 {
			t.Errorf("%d heartbeats in %v at a %v interval, want 8", n, 7*step, step)
		}

		// A new primary knows no session: the worker registers again at
		// once and tells it every fact again.
		f.failover()
		time.Sleep(step)
		synctest.Wait()
		if f.registered() != 2 {
			t.Fatalf("%d registrations after the failover, want 2", f.registered())
		}
		wantHeartbeat(t, f, 8*step, map[string]int64{"a": 0, "w": 0}, "NOTIFY: actives: a", "UPDATE a: running")

		// a moves away; w becomes the active. The worker says at once that
		// a stopped, with its new actives. a's lag grows at the restore
		// rate and its state goes once the lag passes 30000.
		f.assign(2, []string{"w"}, nil, nil)
		time.Sleep(step)
		synctest.Wait()
		wantHeartbeat(t, f, 9*step, map[string]int64{"a": 0, "w": 0}, "NOTIFY: actives: w", "UPDATE w: running")
		if hb, _ := f.last(t); slices.Contains(hb.req.Running, "a") {
			t.Errorf("the heartbeat right after a stopped lists %v as running", hb.req.Running)
		}
		time.Sleep(step)
		synctest.Wait()
		wantHeartbeat(t, f, 10*step, map[string]int64{"a": 10_000, "w": 0})
		time.Sleep(2 * step)
		synctest.Wait()
		wantHeartbeat(t, f, 12*step, map[string]int64{"a": 30_000, "w": 0})
		time.Sleep(step)
		synctest.Wait()
		wantHeartbeat(t, f, 13*step, map[string]int64{"w": 0})

		// a comes back: no state any more, so from the initial lag.
		f.assign(3, []string{"w"}, []string{"a"}, nil)
		time.Sleep(2 * step)
		synctest.Wait()
		wantHeartbeat(t, f, 15*step, map[string]int64{"a": 40_000, "w": 0})

		if err := stop(); err != nil {
			t.Fatalf("Run returned %v on cancellation, want nil", err)
		}
	})
}

// TestRunWaitsForAPrimary: NOT_READY answers are retried by the client
// until a primary serves.
func TestRunWaitsForAPrimary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeController(1000)
		f.notReady = 20 // about 2s of refusals at retry-after 100ms
		stop := startWorker(t, f, Config{ID: "w1", Capacity: 1}, SimulatorConfig{})
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if f.registered() != 1 {
			t.Fatalf("%d registrations", f.registered())
		}
		if _, n := f.last(t); n < 5 {
			t.Errorf("%d heartbeats", n)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRunHeartbeatsThroughAnOutage: failed heartbeats do not stop the
// worker; a standby keeps restoring (the lease bounds actives only) and
// the next heartbeat reports it.
func TestRunHeartbeatsThroughAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeController(1000)
		f.assign(1, nil, []string{"a"}, nil)
		stop := startWorker(t, f, Config{ID: "w1", Capacity: 1}, SimulatorConfig{RestoreRate: 1000, InitialLag: 100_000})
		synctest.Wait()
		f.mu.Lock()
		f.notReady = 1 << 30
		f.mu.Unlock()
		time.Sleep(30 * time.Second)
		f.mu.Lock()
		f.notReady = 0
		f.mu.Unlock()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		hb, _ := f.last(t)
		// Assigned at 0: 100000 - 1000/s × elapsed.
		if want := 100_000 - hb.at.Milliseconds(); hb.req.Lags["a"] != want || hb.at < 30*time.Second {
			t.Errorf("heartbeat at %v: lag %d, want %d", hb.at, hb.req.Lags["a"], want)
		}
		if f.registered() != 1 {
			t.Errorf("%d registrations", f.registered())
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRunRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeController(1000)
		// The controller refuses the arguments: Run gives up.
		stop := startWorker(t, f, Config{ID: "w1", Capacity: 5000}, SimulatorConfig{})
		synctest.Wait()
		if err := stop(); err == nil || !strings.Contains(err.Error(), "capacity") {
			t.Fatalf("Run: %v, want the controller's refusal", err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		// The controller refuses who the worker is: Run gives up too.
		f := newFakeController(1000)
		stop := startWorker(t, f, Config{ID: "intruder", Capacity: 1}, SimulatorConfig{})
		synctest.Wait()
		if err := stop(); !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), "may not register") {
			t.Fatalf("Run: %v, want PermissionDenied", err)
		}
	})
	for _, cfg := range []Config{
		{Controllers: []string{"x:1"}},
		{ID: "bad id", Controllers: []string{"x:1"}},
		{ID: "w1"},
		{ID: "w1", Controllers: []string{" "}},
		{ID: "w1", Controllers: []string{"x:1"}, Labels: map[string]string{"zo ne": "a"}},
		{ID: "w1", Controllers: []string{"x:1"}, Labels: map[string]string{"zone": "a/b"}},
		{ID: "w1", Controllers: []string{"x:1"}, Labels: map[string]string{"": "a"}},
	} {
		if _, err := New(cfg, &Simulator{}); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v): %v, want ErrConfig", cfg, err)
		}
	}
	if _, err := New(Config{ID: "w1", Controllers: []string{"x:1"}}, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("New without a handler: %v, want ErrConfig", err)
	}
	if _, err := NewSimulator(SimulatorConfig{RestoreRate: -1}); !errors.Is(err, ErrConfig) {
		t.Errorf("NewSimulator with a negative rate: %v, want ErrConfig", err)
	}
}

// TestRegisterSendsLabels: the worker registers with its Config.Labels.
func TestRegisterSendsLabels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeController(1000)
		stop := startWorker(t, f, Config{ID: "w1", Capacity: 1, Labels: map[string]string{"zone": "a"}}, SimulatorConfig{})
		time.Sleep(2 * time.Second)
		synctest.Wait()
		f.mu.Lock()
		labels := f.labels
		f.mu.Unlock()
		if len(labels) != 1 || labels["zone"] != "a" {
			t.Errorf("registered with labels %v", labels)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// loadingSim is a Simulator that reports a load for every task.
type loadingSim struct{ *Simulator }

func (loadingSim) Loads() map[string]int64 { return map[string]int64{"t1": 42} }

// TestHeartbeatSendsLoads: a Handler that is a Loader has its loads sent
// with every heartbeat; one that is not sends none.
func TestHeartbeatSendsLoads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeController(1000)
		sim, err := NewSimulator(SimulatorConfig{})
		if err != nil {
			t.Fatal(err)
		}
		stop := startHandler(t, f, Config{ID: "w1", Capacity: 1}, loadingSim{sim})
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if hb, _ := f.last(t); hb.req.Loads["t1"] != 42 {
			t.Errorf("heartbeat loads %v", hb.req.Loads)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		f = newFakeController(1000)
		stop = startWorker(t, f, Config{ID: "w1", Capacity: 1}, SimulatorConfig{})
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if hb, _ := f.last(t); hb.req.Loads != nil {
			t.Errorf("heartbeat loads %v from a handler without", hb.req.Loads)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}
