// Package placement is the primary's side of worker management: the worker
// sessions (soft state reported by Register and Heartbeat; docs/design.md,
// "Tasks, workers, assignments") and
// the assignor loop that turns those facts into committed assignment
// generations (docs/design.md, "The assignor").
//
// The Service is a leader-only service: Start opens a term's sessions, Run
// runs its loop until the term ends and then forgets them. Sessions are never replicated; a new
// primary starts with none and waits one session timeout (the settle
// period) for workers to register again before it plans, so that a
// controller failover never moves a task. Only the plan's result, the
// assignment, goes to the log, and only when it changed.
//
// The loop plans when a worker joins or goes, when the task set changes,
// when a reported lag crosses the acceptable recovery lag (at once: a
// caught-up warm-up or standby takes over without waiting for a probing
// rebalance), and when a probing rebalance is due after a plan that left
// moves waiting (scheduled with delaymgr).
//
// A heartbeat's answer grants the worker only those of its assigned actives
// that no other worker may still run (grants.go; docs/design.md, "At most
// one active"): the others are pending until their previous worker reports
// them stopped or its lease has surely run out.
package placement

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/xce/xce/assign"
	"github.com/xce/xce/delaymgr"
	"github.com/xce/xce/state"
)

// Limits on soft state, so that misbehaving workers cannot grow the
// primary's memory without bound.
const (
	// MaxWorkers bounds the live sessions.
	MaxWorkers = 10_000
	// MaxLags bounds the lags one heartbeat reports.
	MaxLags = 100_000
	// MaxFacts bounds the facts of one heartbeat.
	MaxFacts = 1_000
	// MaxFactText bounds a fact's text in bytes.
	MaxFactText = 1024
)

// Errors of the worker-facing methods. The API maps them to its codes.
var (
	// ErrNotServing: this node runs no term (it is not, or no longer, the
	// primary); the worker should follow the leader hint and retry.
	ErrNotServing = errors.New("the assignor is not running on this node")
	// ErrUnknownWorker: a heartbeat from a worker without a session here;
	// the worker registers again.
	ErrUnknownWorker = errors.New("unknown worker: register again")
	// ErrInvalid wraps every malformed request.
	ErrInvalid = errors.New("invalid request")
	// ErrTooManyWorkers: MaxWorkers sessions exist already.
	ErrTooManyWorkers = errors.New("too many workers")
	// ErrStale: a numbered heartbeat that arrived after a later one of
	// the same session; nothing of it was recorded.
	ErrStale = errors.New("stale heartbeat")
)

// FSM is what the Service reads of the replicated state.
type FSM interface {
	Assignment() (uint64, map[string]state.Placement)
	AssignmentGeneration() (gen, version uint64)
	AllTasks() ([]state.Task, uint64)
	TaskVersion() uint64
	Task(id string) (state.Task, bool)
	TaskEpoch(id string) uint64
}

// ApplyFunc replicates a command and returns the FSM's result.
type ApplyFunc func(ctx context.Context, cmd []byte) (state.Result, error)

// Fact kinds a heartbeat carries.
const (
	FactNotify = iota + 1
	FactUpdate
	FactSetPendingReason
	FactClearPendingReason
)

// Fact is one soft fact from a worker.
type Fact struct {
	Kind int
	Task string
	Text string
}

// Copies are the tasks one worker holds, by kind, from the committed
// assignment, sorted by task id.
type Copies struct {
	Generation uint64
	Actives    []string
	Standbys   []string
	Warmups    []string
}

// Answer is a heartbeat's answer: the worker's copies, its assigned
// actives split into those granted (Actives) and those not yet
// (PendingActives; docs/design.md, "At most one active"), the task epochs
// of all of them, and the active lease.
type Answer struct {
	Copies
	PendingActives []string
	Epochs         map[string]uint64
	ActiveLease    time.Duration
}

// RegisterInfo answers a registration.
type RegisterInfo struct {
	Generation        uint64
	SessionTimeout    time.Duration
	HeartbeatInterval time.Duration
}

// WorkerInfo is what ListWorkers shows of one session.
type WorkerInfo struct {
	ID         string
	Capacity   int
	Addr       string
	LastSeen   time.Duration // age of the last message
	Lags       map[string]int64
	Notice     string
	Copies     Copies
	Registered time.Time
}

// TaskSoft is what the primary knows of one task beyond the log.
type TaskSoft struct {
	Lags          map[string]int64
	PendingReason string
	Update        string
}

// Service implements the worker sessions and the assignor loop.
type Service struct {
	cfg   Config
	fsm   FSM
	apply ApplyFunc
	log   zerolog.Logger

	mu   sync.Mutex
	term *termState

	idxMu sync.Mutex
	idx   *workerIndex

	// plans counts plans computed (for tests and metrics).
	plans atomic.Uint64
}

// New returns a stopped Service.
func New(cfg Config, fsm FSM, apply ApplyFunc, log zerolog.Logger) (*Service, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("placement: %w", err)
	}
	return &Service{cfg: cfg, fsm: fsm, apply: apply, log: log.With().Str("component", "assignor").Logger()}, nil
}

// Name implements controller.LeaderService.
func (s *Service) Name() string { return "assignor" }

type session struct {
	id         string
	capacity   int
	addr       string
	registered time.Time
	lastSeen   time.Time
	lags       map[string]int64
	notice     string
	updates    map[string]string
	pending    map[string]string
	// seq is the number of the last numbered heartbeat processed.
	seq uint64
}

type termState struct {
	term    uint64
	started time.Time
	// settleUntil is when planning may start.
	settleUntil time.Time
	workers     map[string]*session
	// grants records what each worker may hold as active.
	grants *grantBook
	kick   chan struct{}
	delays *delaymgr.Manager
	// Written by the loop only, read under Service.mu.
	followup bool
}

func kick(ts *termState) {
	select {
	case ts.kick <- struct{}{}:
	default:
	}
}

// current returns the running term or ErrNotServing. Callers hold s.mu.
func (s *Service) current() (*termState, error) {
	if s.term == nil {
		return nil, ErrNotServing
	}
	return s.term, nil
}

// Register opens (or renews) a worker's session. A known worker that
// registers again keeps its lags and facts; a changed capacity triggers a
// plan.
func (s *Service) Register(id string, capacity uint32, addr string) (RegisterInfo, error) {
	if !validID(id) {
		return RegisterInfo{}, fmt.Errorf("%w: worker_id %q: must be 1-128 characters of [A-Za-z0-9._-]", ErrInvalid, id)
	}
	if capacity > assign.MaxCapacity {
		return RegisterInfo{}, fmt.Errorf("%w: capacity %d exceeds the maximum %d", ErrInvalid, capacity, assign.MaxCapacity)
	}
	if len(addr) > 256 {
		return RegisterInfo{}, fmt.Errorf("%w: client_addr: longer than 256 bytes", ErrInvalid)
	}
	now := time.Now()
	s.mu.Lock()
	ts, err := s.current()
	if err != nil {
		s.mu.Unlock()
		return RegisterInfo{}, err
	}
	w, known := ts.workers[id]
	switch {
	case !known && len(ts.workers) >= MaxWorkers:
		s.mu.Unlock()
		return RegisterInfo{}, fmt.Errorf("%w: %d sessions", ErrTooManyWorkers, MaxWorkers)
	case !known:
		w = &session{id: id, registered: now, lags: map[string]int64{}, updates: map[string]string{}, pending: map[string]string{}}
		ts.workers[id] = w
	}
	changed := !known || w.capacity != int(capacity)
	w.capacity, w.addr, w.lastSeen = int(capacity), addr, now
	// A worker process that restarted numbers its heartbeats from 1 again;
	// one that did not keeps counting up, so a heartbeat it sent before
	// registering again and that arrives late is still refused once a
	// newer one was processed.
	w.seq = 0
	ts.grants.heard(id, now)
	n := len(ts.workers)
	s.mu.Unlock()
	if changed {
		s.log.Info().Str("worker", id).Uint32("capacity", capacity).Str("addr", addr).Bool("new", !known).Int("workers", n).Msg("worker registered")
		kick(ts)
	}
	gen, _ := s.fsm.AssignmentGeneration()
	return RegisterInfo{Generation: gen, SessionTimeout: s.cfg.SessionTimeout, HeartbeatInterval: s.cfg.HeartbeatInterval}, nil
}

// Heartbeat renews a session, records the worker's lags, facts and the
// actives it runs, and answers with the worker's copies in the committed
// assignment, its assigned actives split into granted and pending.
func (s *Service) Heartbeat(id string, lags map[string]int64, facts []Fact, running []string) (Answer, error) {
	return s.HeartbeatSeq(id, 0, lags, facts, running)
}

// HeartbeatSeq is Heartbeat for the heartbeat numbered seq of its session
// (0: not numbered): one numbered at or below the last processed is
// refused with ErrStale and changes nothing.
func (s *Service) HeartbeatSeq(id string, seq uint64, lags map[string]int64, facts []Fact, running []string) (Answer, error) {
	if !validID(id) {
		return Answer{}, fmt.Errorf("%w: worker_id %q: must be 1-128 characters of [A-Za-z0-9._-]", ErrInvalid, id)
	}
	if len(lags) > MaxLags {
		return Answer{}, fmt.Errorf("%w: %d lags (at most %d)", ErrInvalid, len(lags), MaxLags)
	}
	for _, t := range slices.Sorted(maps.Keys(lags)) {
		if !validID(t) {
			return Answer{}, fmt.Errorf("%w: lags: task id %q", ErrInvalid, t)
		}
		if lags[t] < 0 {
			return Answer{}, fmt.Errorf("%w: lags: negative lag %d for task %q", ErrInvalid, lags[t], t)
		}
	}
	if len(running) > MaxLags {
		return Answer{}, fmt.Errorf("%w: %d running tasks (at most %d)", ErrInvalid, len(running), MaxLags)
	}
	for _, t := range running {
		if !validID(t) {
			return Answer{}, fmt.Errorf("%w: running: task id %q", ErrInvalid, t)
		}
	}
	if len(facts) > MaxFacts {
		return Answer{}, fmt.Errorf("%w: %d facts (at most %d)", ErrInvalid, len(facts), MaxFacts)
	}
	for i, f := range facts {
		if len(f.Text) > MaxFactText {
			return Answer{}, fmt.Errorf("%w: facts[%d]: text longer than %d bytes", ErrInvalid, i, MaxFactText)
		}
		switch f.Kind {
		case FactNotify:
		case FactUpdate, FactSetPendingReason, FactClearPendingReason:
			if !validID(f.Task) {
				return Answer{}, fmt.Errorf("%w: facts[%d]: task_id %q", ErrInvalid, i, f.Task)
			}
		default:
			return Answer{}, fmt.Errorf("%w: facts[%d]: unknown kind %d", ErrInvalid, i, f.Kind)
		}
	}
	s.mu.Lock()
	ts, err := s.current()
	if err != nil {
		s.mu.Unlock()
		return Answer{}, err
	}
	w, ok := ts.workers[id]
	if !ok {
		s.mu.Unlock()
		return Answer{}, fmt.Errorf("%w: worker %q has no session with this primary", ErrUnknownWorker, id)
	}
	if seq != 0 {
		if seq <= w.seq {
			s.mu.Unlock()
			return Answer{}, fmt.Errorf("%w: worker %q sent heartbeat %d after %d", ErrStale, id, seq, w.seq)
		}
		w.seq = seq
	}
	w.lastSeen = time.Now()
	crossed := s.crossed(w.lags, lags)
	w.lags = maps.Clone(lags)
	if w.lags == nil {
		w.lags = map[string]int64{}
	}
	for _, f := range facts {
		switch f.Kind {
		case FactNotify:
			w.notice = f.Text
		case FactUpdate:
			if _, exists := s.fsm.Task(f.Task); exists {
				w.updates[f.Task] = f.Text
			}
		case FactSetPendingReason:
			if _, exists := s.fsm.Task(f.Task); exists {
				w.pending[f.Task] = f.Text
			}
		case FactClearPendingReason:
			delete(w.pending, f.Task)
		}
	}
	a := s.answer(ts, w, running)
	s.mu.Unlock()
	if crossed != "" {
		s.log.Debug().Str("worker", id).Str("task", crossed).Msg("a lag crossed the acceptable recovery lag: planning")
		kick(ts)
	}
	return a, nil
}

// answer records a worker's running report, decides the grants of its
// assigned actives and builds its heartbeat's answer. Callers hold s.mu.
func (s *Service) answer(ts *termState, w *session, running []string) Answer {
	c := s.copiesOf(w.id)
	d := ts.grants.report(w.id, w.lastSeen, running, c.Actives)
	a := Answer{Copies: c, Epochs: map[string]uint64{}, ActiveLease: s.cfg.ActiveLease()}
	a.Actives = nil
	for _, t := range c.Actives {
		if d.Granted[t] {
			a.Actives = append(a.Actives, t)
		} else {
			a.PendingActives = append(a.PendingActives, t)
		}
	}
	for _, l := range [][]string{c.Actives, c.Standbys, c.Warmups} {
		for _, t := range l {
			a.Epochs[t] = s.fsm.TaskEpoch(t)
		}
	}
	return a
}

// crossed returns a task whose caught-up state differs between two lag
// reports ("" when none does).
func (s *Service) crossed(before, after map[string]int64) string {
	limit := s.cfg.Assign.AcceptableRecoveryLag
	up := func(m map[string]int64, t string) bool {
		l, ok := m[t]
		return ok && l <= limit
	}
	for t := range after {
		if up(before, t) != up(after, t) {
			return t
		}
	}
	for t := range before {
		if up(before, t) != up(after, t) {
			return t
		}
	}
	return ""
}

// workerIndex lists each worker's copies for one version of the committed
// assignment, so that heartbeats need not scan every task.
type workerIndex struct {
	version uint64
	gen     uint64
	by      map[string]*Copies
}

func (s *Service) index() *workerIndex {
	gen, ver := s.fsm.AssignmentGeneration()
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	if s.idx != nil && s.idx.version == ver && s.idx.gen == gen {
		return s.idx
	}
	gen, a := s.fsm.Assignment()
	idx := &workerIndex{version: ver, gen: gen, by: map[string]*Copies{}}
	get := func(w string) *Copies {
		c := idx.by[w]
		if c == nil {
			c = &Copies{Generation: gen}
			idx.by[w] = c
		}
		return c
	}
	for _, t := range slices.Sorted(maps.Keys(a)) {
		p := a[t]
		if p.Active != "" {
			c := get(p.Active)
			c.Actives = append(c.Actives, t)
		}
		for _, w := range p.Standbys {
			c := get(w)
			c.Standbys = append(c.Standbys, t)
		}
		for _, w := range p.Warmups {
			c := get(w)
			c.Warmups = append(c.Warmups, t)
		}
	}
	s.idx = idx
	return idx
}

func (s *Service) copiesOf(worker string) Copies {
	idx := s.index()
	if c := idx.by[worker]; c != nil {
		return *c
	}
	return Copies{Generation: idx.gen}
}

// Workers lists the live sessions by id, and whether the primary is still
// settling. It returns ErrNotServing off the primary.
func (s *Service) Workers() ([]WorkerInfo, bool, error) {
	now := time.Now()
	s.mu.Lock()
	ts, err := s.current()
	if err != nil {
		s.mu.Unlock()
		return nil, false, err
	}
	out := make([]WorkerInfo, 0, len(ts.workers))
	for _, w := range ts.workers {
		out = append(out, WorkerInfo{
			ID: w.id, Capacity: w.capacity, Addr: w.addr, LastSeen: now.Sub(w.lastSeen),
			Lags: maps.Clone(w.lags), Notice: w.notice, Registered: w.registered,
		})
	}
	settling := now.Before(ts.settleUntil)
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b WorkerInfo) int { return strings.Compare(a.ID, b.ID) })
	for i := range out {
		out[i].Copies = s.copiesOf(out[i].ID)
	}
	return out, settling, nil
}

// Soft returns the primary's soft facts per task (lags by worker, the
// active worker's pending reason and update), whether it is settling and
// whether moves wait for warm-ups. ok is false off the primary.
func (s *Service) Soft() (tasks map[string]TaskSoft, settling, followup, ok bool) {
	_, a := s.fsm.Assignment()
	s.mu.Lock()
	defer s.mu.Unlock()
	ts, err := s.current()
	if err != nil {
		return nil, false, false, false
	}
	tasks = map[string]TaskSoft{}
	for _, w := range ts.workers {
		for t, lag := range w.lags {
			ti := tasks[t]
			if ti.Lags == nil {
				ti.Lags = map[string]int64{}
			}
			ti.Lags[w.id] = lag
			tasks[t] = ti
		}
	}
	for t, p := range a {
		w := ts.workers[p.Active]
		if w == nil {
			continue
		}
		ti := tasks[t]
		ti.PendingReason, ti.Update = w.pending[t], w.updates[t]
		tasks[t] = ti
	}
	return tasks, time.Now().Before(ts.settleUntil), ts.followup, true
}

func validID(s string) bool {
	if len(s) < 1 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
