package fence

import (
	"context"
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
}

// NewDiscarder returns a discarder that trims every interval.
func NewDiscarder(src Source, apply func(ctx context.Context, cmd []byte) error, every time.Duration, log zerolog.Logger) *Discarder {
	return &Discarder{src: src, apply: apply, every: every, log: log}
}

// Name implements controller.LeaderService.
func (d *Discarder) Name() string { return "outbox-discarder" }

// Run trims the outbox every interval until ctx ends (the node leaves
// PRIMARY), then returns nil.
func (d *Discarder) Run(ctx context.Context, _ uint64) error {
	t := time.NewTicker(d.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
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
}

// Status reports publishing as disabled, with the events held.
func (d *Discarder) Status() (epoch, lag uint64, state string) {
	_, held, _ := d.src.Outbox(0)
	return 0, uint64(held), StateDisabled
}
