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
	// IsDrained and DrainVersion read the drained workers (xce workers
	// drain); the version changes with the set.
	IsDrained(id string) bool
	DrainVersion() uint64
	// DeletedSinceGeneration counts the tasks deleted with a placement
	// since the last generation: the loop writes a generation for them
	// even when nothing else changed, so that watchers see them go.
	DeletedSinceGeneration() int
	// PlacementFrozen reports whether an operator froze the placement
	// (xce placement freeze): the assignor then handles failures only.
	PlacementFrozen() bool
	// WorkerAddrs and WorkerAddrVersion read the workers' addresses in
	// the log (addrs.go); the version changes with them.
	WorkerAddrs() (map[string]string, uint64)
	WorkerAddrVersion() uint64
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
	// Left: the worker was leaving and its session has ended; it holds
	// nothing and may exit.
	Left bool
	// Drained: an operator drained the worker (its actives move away).
	Drained bool
}

// RegisterInfo answers a registration.
type RegisterInfo struct {
	Generation        uint64
	SessionTimeout    time.Duration
	HeartbeatInterval time.Duration
	// MaxWait is the longest the primary holds a heartbeat that asks (0:
	// it answers at once); a primary that holds heartbeats also hands a
	// leaving worker's actives over.
	MaxWait time.Duration
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
	// DrainState is "" (it runs what it is given), "draining" (drained,
	// with actives still to move), "drained" (drained, no active left) or
	// "leaving" (the worker is stopping and hands its actives over).
	DrainState string
	// Labels are the labels the worker registered with (nil: none).
	Labels map[string]string
}

// The drain states of WorkerInfo.DrainState.
const (
	DrainDraining = "draining"
	DrainDrained  = "drained"
	DrainLeaving  = "leaving"
)

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
	// addrGate says whether worker addresses may be written (SetAddrGate).
	addrGate atomic.Pointer[func() error]
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
	labels     map[string]string
	registered time.Time
	lastSeen   time.Time
	lags       map[string]int64
	// loads are the loads of the last heartbeat (nil: none reported).
	loads   map[string]int64
	notice  string
	updates map[string]string
	pending map[string]string
	// seq is the number of the last numbered heartbeat processed.
	seq uint64
	// leaving: the worker said it is stopping; it runs no new active.
	leaving bool
	// reported: a heartbeat came since the session opened. The assignor
	// plans for a worker only then, knowing its lags: planned at its
	// registration, a worker that holds state would get warm-ups it does
	// not need, and moves when its lags arrive.
	reported bool
	// answered is the last answer sent, to the heartbeat answeredSeq.
	answered    Answer
	answeredSeq uint64
	// held, while a heartbeat is held, is closed to end the hold.
	held chan struct{}
}

type termState struct {
	term    uint64
	started time.Time
	// unspread is the last plan's count of Result.Unspread, so that a
	// change is logged once rather than every plan.
	unspread int
	// settleUntil is when planning may start.
	settleUntil time.Time
	workers     map[string]*session
	// away are the workers whose session expired less than
	// Config.ReplaceDelay ago and that have not reported since, by id: the
	// assignor keeps their standbys for them (assign.Worker.Away). At most
	// MaxWorkers; like the sessions, they belong to the term.
	away map[string]awayWorker
	// grants records what each worker may hold as active.
	grants *grantBook
	kick   chan struct{}
	delays *delaymgr.Manager
	// changed is closed and replaced whenever an answer may change
	// (signal); done is closed when the term ends. Held heartbeats wait on
	// both.
	changed chan struct{}
	done    chan struct{}
	// Written by the loop only, read under Service.mu.
	followup bool
	// waits is why each task waits on a drained worker, as last logged
	// (the loop's own).
	waits map[string]string
	// addrsDirty: a session began, changed its address or ended since
	// the loop last compared the addresses with the log's (addrs.go).
	addrsDirty bool
}

// awayWorker is a worker whose session expired, until its replacement
// delay ends (until) or it reports again.
type awayWorker struct {
	labels map[string]string
	until  time.Time
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

// Registration is what a worker says of itself when it registers.
type Registration struct {
	Worker   string
	Capacity uint32
	Addr     string
	// Labels say where the worker runs (zone, rack, host, ...), within
	// assign.CheckLabels' bounds; the assignor spreads the copies of a
	// task over the values of its spread keys.
	Labels map[string]string
}

// Register opens (or renews) the session of a worker without labels (see
// RegisterWith).
func (s *Service) Register(id string, capacity uint32, addr string) (RegisterInfo, error) {
	return s.RegisterWith(Registration{Worker: id, Capacity: capacity, Addr: addr})
}

// RegisterWith opens (or renews) a worker's session. A known worker that
// registers again keeps its lags and facts; a changed capacity or labels
// trigger a plan. A worker that comes back while it is away (its session
// ended less than Config.ReplaceDelay ago) is no longer away.
func (s *Service) RegisterWith(r Registration) (RegisterInfo, error) {
	id, capacity, addr := r.Worker, r.Capacity, r.Addr
	if !validID(id) {
		return RegisterInfo{}, fmt.Errorf("%w: worker_id %q: must be 1-128 characters of [A-Za-z0-9._-]", ErrInvalid, id)
	}
	if capacity > assign.MaxCapacity {
		return RegisterInfo{}, fmt.Errorf("%w: capacity %d exceeds the maximum %d", ErrInvalid, capacity, assign.MaxCapacity)
	}
	if len(addr) > 256 {
		return RegisterInfo{}, fmt.Errorf("%w: client_addr: longer than 256 bytes", ErrInvalid)
	}
	if err := assign.CheckLabels(r.Labels); err != nil {
		return RegisterInfo{}, fmt.Errorf("%w: labels: %v", ErrInvalid, err)
	}
	labels := maps.Clone(r.Labels)
	if len(labels) == 0 {
		labels = nil
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
	changed := !known || w.capacity != int(capacity) || w.leaving || !maps.Equal(w.labels, labels)
	if !known || w.addr != addr {
		ts.addrsDirty = true
	}
	w.capacity, w.addr, w.lastSeen, w.labels = int(capacity), addr, now, labels
	// A registration is a new process, or one that lost its session: it
	// says again whether it is leaving. A heartbeat held for the old one
	// is over.
	w.leaving = false
	w.answered, w.answeredSeq = Answer{}, 0
	if w.held != nil {
		close(w.held)
		w.held = nil
	}
	// A worker process that restarted numbers its heartbeats from 1 again;
	// one that did not keeps counting up, so a heartbeat it sent before
	// registering again and that arrives late is still refused once a
	// newer one was processed.
	w.seq = 0
	ts.grants.heard(id, now)
	n := len(ts.workers)
	s.mu.Unlock()
	if changed {
		s.log.Info().Str("worker", id).Uint32("capacity", capacity).Str("addr", addr).Str("labels", assign.FormatLabels(labels)).
			Bool("new", !known).Int("workers", n).Msg("worker registered")
		if known {
			kick(ts) // a new one is planned for once it reports (Beat)
		}
	}
	gen, _ := s.fsm.AssignmentGeneration()
	return RegisterInfo{Generation: gen, SessionTimeout: s.cfg.SessionTimeout, HeartbeatInterval: s.cfg.HeartbeatInterval,
		MaxWait: max(s.cfg.MaxHold, 0)}, nil
}

// workerIndex lists each worker's copies for one version of the committed
// assignment, so that heartbeats need not scan every task.
type workerIndex struct {
	version uint64
	gen     uint64
	by      map[string]*Copies
	// epochs are the placed tasks' epochs, from the same read of the
	// assignment as the copies: an answer must not pair one generation's
	// copies with another's epochs.
	epochs map[string]uint64
}

func (s *Service) index() *workerIndex {
	gen, ver := s.fsm.AssignmentGeneration()
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	if s.idx != nil && s.idx.version == ver && s.idx.gen == gen {
		return s.idx
	}
	gen, a := s.fsm.Assignment()
	idx := &workerIndex{version: ver, gen: gen, by: map[string]*Copies{}, epochs: make(map[string]uint64, len(a))}
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
		idx.epochs[t] = p.Epoch
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
	c, _ := s.copiesAndEpochs(worker)
	return c
}

// copiesAndEpochs is copiesOf with the epochs of the assignment the copies
// come from (the map is shared: read it only).
func (s *Service) copiesAndEpochs(worker string) (Copies, map[string]uint64) {
	idx := s.index()
	if c := idx.by[worker]; c != nil {
		return *c, idx.epochs
	}
	return Copies{Generation: idx.gen}, idx.epochs
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
		wi := WorkerInfo{
			ID: w.id, Capacity: w.capacity, Addr: w.addr, LastSeen: now.Sub(w.lastSeen),
			Lags: maps.Clone(w.lags), Notice: w.notice, Registered: w.registered, Labels: maps.Clone(w.labels),
		}
		if w.leaving {
			wi.DrainState = DrainLeaving
		}
		out = append(out, wi)
	}
	settling := now.Before(ts.settleUntil)
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b WorkerInfo) int { return strings.Compare(a.ID, b.ID) })
	for i := range out {
		w := &out[i]
		w.Copies = s.copiesOf(w.ID)
		if w.DrainState == "" && s.fsm.IsDrained(w.ID) {
			w.DrainState = DrainDrained
			if len(w.Copies.Actives) > 0 {
				w.DrainState = DrainDraining
			}
		}
	}
	return out, settling, nil
}

// AwayInfo is a worker whose session ended within the replacement delay.
type AwayInfo struct {
	ID     string
	Labels map[string]string
	// ReplacedIn is how long until its copies are replaced.
	ReplacedIn time.Duration
	// Standbys are the tasks the committed assignment keeps for it.
	Standbys []string
}

// Addrs returns the client address of every worker with a session that
// gave one; none off the primary.
func (s *Service) Addrs() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts, err := s.current()
	if err != nil {
		return nil
	}
	out := make(map[string]string, len(ts.workers))
	for id, w := range ts.workers {
		if w.addr != "" {
			out[id] = w.addr
		}
	}
	return out
}

// Away lists the away workers by id; none off the primary.
func (s *Service) Away() []AwayInfo {
	now := time.Now()
	s.mu.Lock()
	ts, err := s.current()
	if err != nil {
		s.mu.Unlock()
		return nil
	}
	out := make([]AwayInfo, 0, len(ts.away))
	for id, a := range ts.away {
		out = append(out, AwayInfo{ID: id, Labels: maps.Clone(a.labels), ReplacedIn: max(a.until.Sub(now), 0)})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b AwayInfo) int { return strings.Compare(a.ID, b.ID) })
	for i := range out {
		out[i].Standbys = s.copiesOf(out[i].ID).Standbys
	}
	return out
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
