package succession

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/xce/xce/internal/fielderr"
)

// ErrInvalidLeaseConfig is wrapped by every error LeaseConfig.Validate returns.
var ErrInvalidLeaseConfig = errors.New("invalid lease config")

// LeaseConfig sets the timing of a role's lease. All members of a role must use
// the same values, or their anchors differ.
type LeaseConfig struct {
	// LeaseMillis is how long a granted or renewed lease lasts.
	LeaseMillis int64
	// RenewMillis is how long after a grant the holder renews; the margin
	// LeaseMillis - RenewMillis absorbs a slow or retried renewal.
	RenewMillis int64
	// StaggerMillis separates consecutive ranks' challenges. It only saves
	// epoch churn; 0 lets every challenger go at once.
	StaggerMillis int64
}

// MinLeaseMillis is the shortest lease: a holder must be able to renew
// within it.
const MinLeaseMillis = 100

// DefaultLeaseConfig is a 3 s lease renewed every second (leaving 2 s for
// slow renewals before anyone challenges) with challengers 500 ms apart;
// the config file's ha.lease, ha.renew and ha.stagger default to it.
func DefaultLeaseConfig() LeaseConfig {
	return LeaseConfig{LeaseMillis: 3_000, RenewMillis: 1_000, StaggerMillis: 500}
}

// Validate reports every field that is out of range, each as a
// *fielderr.Error naming the field, with the durations written as such;
// each error wraps ErrInvalidLeaseConfig.
func (c LeaseConfig) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidLeaseConfig, fielderr.Errorf(field, format, args...)))
	}
	if c.LeaseMillis < MinLeaseMillis {
		add("LeaseMillis", "must be at least %s, got %s", ms(MinLeaseMillis), ms(c.LeaseMillis))
	}
	if c.RenewMillis <= 0 || c.RenewMillis >= c.LeaseMillis {
		add("RenewMillis", "must be positive and less than {LeaseMillis} (%s), got %s", ms(c.LeaseMillis), ms(c.RenewMillis))
	}
	if c.StaggerMillis < 0 {
		add("StaggerMillis", "must not be negative, got %s", ms(c.StaggerMillis))
	}
	return errors.Join(errs...)
}

// ms renders milliseconds as a duration ("1.5s"), or as a count of
// milliseconds beyond a time.Duration's range.
func ms(n int64) string {
	if limit := int64(math.MaxInt64 / time.Millisecond); n > limit || n < -limit {
		return fmt.Sprintf("%dms", n)
	}
	return (time.Duration(n) * time.Millisecond).String()
}
