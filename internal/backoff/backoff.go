// Package backoff is the one retry delay of xce: exponential between a floor
// and a ceiling, with an optional jitter, and a wait that ends with its
// context.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is an exponential delay: Min, then twice the previous delay,
// never more than Max. The zero Backoff waits no time. It is not safe for
// concurrent use; each retry loop owns its own.
type Backoff struct {
	// Min is the first delay, and the delay after Reset.
	Min time.Duration
	// Max caps the delay.
	Max time.Duration
	// Jitter adds up to this fraction of each delay at random (0.5: up to
	// half again), so that many retriers do not wake together.
	Jitter float64

	cur time.Duration
}

// Next returns the delay to wait before the next attempt and doubles the
// one after it.
func (b *Backoff) Next() time.Duration {
	if b.cur == 0 {
		b.cur = b.Min
	}
	d := b.cur
	b.cur = min(2*b.cur, b.Max)
	if b.cur < b.Min {
		b.cur = b.Min
	}
	if b.Jitter > 0 && d > 0 {
		d += time.Duration(rand.Int64N(int64(float64(d)*b.Jitter) + 1))
	}
	return d
}

// Reset makes the next delay Min again: call it after an attempt succeeds.
func (b *Backoff) Reset() { b.cur = 0 }

// Wait waits Next() or until ctx ends; it reports whether to go on.
func (b *Backoff) Wait(ctx context.Context) bool { return Sleep(ctx, b.Next()) }

// Sleep waits d or until ctx ends; it reports whether to go on (false once
// ctx has ended, even if d has also passed).
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return ctx.Err() == nil
	}
}
