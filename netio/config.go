package netio

import (
	"time"

	"github.com/xce/xce/internal/fielderr"
)

// fdsForOthers is what the client port's caps leave, besides the peer
// port's connections, for descriptors that are neither: storage files,
// listeners, outbound peer and Kafka connections.
const fdsForOthers = 128

// maxConcurrentStreams caps the HTTP/2 streams of one client connection.
const maxConcurrentStreams = 256

// FDHeadroom is Limits.FDHeadroom for a node whose peer port takes up to
// peerConns connections.
func FDHeadroom(peerConns int) int { return peerConns + fdsForOthers }

// DefaultLimits are the API server's limits unless configured otherwise;
// the config file's limits.client section defaults to them.
func DefaultLimits() Limits {
	return Limits{
		MaxConnections:       1024,
		HealthReserve:        8,
		FDHeadroom:           FDHeadroom(128),
		ReadHeaderTimeout:    5 * time.Second,
		ReadTimeout:          10 * time.Second,
		WriteTimeout:         10 * time.Second,
		IdleTimeout:          2 * time.Minute,
		MaxHeaderBytes:       64 << 10,
		MaxConcurrentStreams: maxConcurrentStreams,
	}
}

// Bounds of Limits.
const (
	maxConnections   = 1 << 20
	maxHealthReserve = 1024
	minHeaderBytes   = 4 << 10
	maxHeaderBytes   = 16 << 20
	minLimitTimeout  = 100 * time.Millisecond
	maxLimitTimeout  = time.Hour
	minIdle          = time.Second
	maxIdle          = 24 * time.Hour
)

// Validate reports every limit out of range as a fielderr.List, each
// named by its field. It asks for a cap: a MaxConnections of 0 (no cap) is
// for tests that build a server directly.
func (l Limits) Validate() error {
	var errs fielderr.List
	intRange := func(field string, v, lo, hi int) {
		if v < lo || v > hi {
			errs.Add(field, "must be between %d and %d (got %d)", lo, hi, v)
		}
	}
	durRange := func(field string, d, lo, hi time.Duration) {
		if d < lo || d > hi {
			errs.Add(field, "must be between %s and %s (got %s)", lo, hi, d)
		}
	}
	intRange("MaxConnections", l.MaxConnections, 1, maxConnections)
	intRange("HealthReserve", l.HealthReserve, 0, maxHealthReserve)
	durRange("ReadHeaderTimeout", l.ReadHeaderTimeout, minLimitTimeout, maxLimitTimeout)
	durRange("ReadTimeout", l.ReadTimeout, minLimitTimeout, maxLimitTimeout)
	durRange("WriteTimeout", l.WriteTimeout, minLimitTimeout, maxLimitTimeout)
	durRange("IdleTimeout", l.IdleTimeout, minIdle, maxIdle)
	intRange("MaxHeaderBytes", l.MaxHeaderBytes, minHeaderBytes, maxHeaderBytes)
	return errs.Err()
}
