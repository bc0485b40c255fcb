package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Defaults of SimulatorConfig.
const (
	DefaultRestoreRate = 10_000
	DefaultInitialLag  = 50_000
	// DefaultDropLag is 100 times the default acceptable recovery lag
	// (10000): a copy that far behind is worth less than a fresh restore.
	DefaultDropLag   = 1_000_000
	DefaultDropAfter = 60 * time.Second
)

// SimulatorConfig tunes the Simulator.
type SimulatorConfig struct {
	// RestoreRate: records/s a held copy catches up (0: DefaultRestoreRate).
	RestoreRate float64
	// GrowthRate: records/s an unheld copy falls behind (0: RestoreRate).
	GrowthRate float64
	// InitialLag: lag of a copy assigned without state (0:
	// DefaultInitialLag; negative: start caught up).
	InitialLag int64
	// DropLag, DropAfter: an unheld copy is dropped past either (0: the
	// defaults, 1,000,000 records and 60s).
	DropLag   int64
	DropAfter time.Duration
	// Logger receives the simulator's log lines (caught up, dropped);
	// nil: they are dropped.
	Logger *slog.Logger
}

func (cfg SimulatorConfig) withDefaults() (SimulatorConfig, error) {
	if cfg.RestoreRate == 0 {
		cfg.RestoreRate = DefaultRestoreRate
	}
	if cfg.GrowthRate == 0 {
		cfg.GrowthRate = cfg.RestoreRate
	}
	switch {
	case cfg.InitialLag == 0:
		cfg.InitialLag = DefaultInitialLag
	case cfg.InitialLag < 0:
		cfg.InitialLag = 0
	}
	if cfg.DropLag == 0 {
		cfg.DropLag = DefaultDropLag
	}
	if cfg.DropAfter == 0 {
		cfg.DropAfter = DefaultDropAfter
	}
	switch {
	case cfg.RestoreRate < 0 || cfg.RestoreRate > 1e12:
		return cfg, fmt.Errorf("%w: restore rate %v: must be positive", ErrConfig, cfg.RestoreRate)
	case cfg.GrowthRate < 0 || cfg.GrowthRate > 1e12:
		return cfg, fmt.Errorf("%w: growth rate %v: must be positive", ErrConfig, cfg.GrowthRate)
	case cfg.DropLag < 0:
		return cfg, fmt.Errorf("%w: drop lag %d: must be positive", ErrConfig, cfg.DropLag)
	case cfg.DropAfter < 0:
		return cfg, fmt.Errorf("%w: drop after %s: must be positive", ErrConfig, cfg.DropAfter)
	}
	return cfg, nil
}

// Simulator is the Handler of the reference worker (`xce worker`): it
// simulates the state of its copies with a Sim. A copy it holds (active,
// standby or warm-up) catches up at RestoreRate from InitialLag (a task it
// has no state for) to 0 and stays there (an active also processes its
// input); a copy it no longer holds — also an active stopped because the
// lease ran out — falls behind at GrowthRate and is dropped past DropLag
// or after DropAfter. It is a Lagger: its lags, unheld copies' included,
// are what the worker reports.
type Simulator struct {
	cfg SimulatorConfig
	log *slog.Logger

	mu   sync.Mutex
	sim  *Sim
	last time.Time
}

// NewSimulator returns a simulator with no state. It returns an error
// wrapping ErrConfig for a bad config.
func NewSimulator(cfg SimulatorConfig) (*Simulator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Simulator{cfg: cfg, log: orDiscard(cfg.Logger), last: time.Now(), sim: NewSim(SimConfig{
		RestoreRate: cfg.RestoreRate, GrowthRate: cfg.GrowthRate, InitialLag: cfg.InitialLag,
		DropLag: cfg.DropLag, DropAfter: cfg.DropAfter,
	})}, nil
}

// Config returns the simulator's config with its defaults filled in.
func (s *Simulator) Config() SimulatorConfig { return s.cfg }

// Run holds c in the simulation until ctx ends, then lets it go.
func (s *Simulator) Run(ctx context.Context, c Copy, report func(lag int64)) error {
	s.mu.Lock()
	s.advance()
	s.sim.Hold(c.Task, c.Role)
	lag, _ := s.sim.Lag(c.Task)
	s.mu.Unlock()
	report(lag)
	<-ctx.Done()
	s.mu.Lock()
	s.advance()
	s.sim.Release(c.Task)
	s.mu.Unlock()
	return nil
}

// Lags brings the simulation to now and returns the lag of every task it
// keeps state for.
func (s *Simulator) Lags() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	return s.sim.Lags()
}

// advance brings the simulation to now and logs what changed (under mu).
func (s *Simulator) advance() {
	now := time.Now()
	caughtUp, dropped := s.sim.Advance(now.Sub(s.last))
	s.last = now
	for _, t := range caughtUp {
		s.log.Info("caught up", "task", t, "role", s.sim.Role(t).String())
	}
	for _, t := range dropped {
		s.log.Info("dropped the state of a task no longer held", "task", t)
	}
}
