package fence

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/xce/xce/state"
)

// Discarder is the leader-only service that stands in for the publisher
// when publishing is disabled (no brokers): it trims the outbox through the
// log so it does not grow without bound.
type Discarder struct {
	src   Source
	apply func(ctx context.Context, cmd []byte) error
	every time.Duration
	log   zerolog.Logger

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// NewDiscarder returns a discarder that trims every interval.
func NewDiscarder(src Source, apply func(ctx context.Context, cmd []byte) error, every time.Duration, log zerolog.Logger) *Discarder {
	return &Discarder{src: src, apply: apply, every: every, log: log}
}

// Name implements controller.LeaderService.
func (d *Discarder) Name() string { return "outbox-discarder" }

// Establish starts trimming.
func (d *Discarder) Establish(_ context.Context, _ uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cancel != nil {
		return errors.New("discarder already running")
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel, d.done = cancel, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		t := time.NewTicker(d.every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			evs := d.src.EventsAfter(0, 1<<30)
			if len(evs) == 0 {
				continue
			}
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := d.apply(actx, (&state.Command{Type: state.CmdTrimOutbox, UpTo: evs[len(evs)-1].Index}).Encode())
			cancel()
			if err != nil && ctx.Err() == nil {
				d.log.Debug().Err(err).Msg("outbox trim not replicated; will retry")
			}
		}
	}(d.done)
	return nil
}

// Revoke stops trimming.
func (d *Discarder) Revoke() {
	d.mu.Lock()
	cancel, done := d.cancel, d.done
	d.cancel, d.done = nil, nil
	d.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Status reports publishing as disabled, with the events held.
func (d *Discarder) Status() (epoch, lag uint64, state string) {
	_, held, _ := d.src.Outbox(0)
	return 0, uint64(held), StateDisabled
}
