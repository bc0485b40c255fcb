// Package kafkaerr says what an error from Kafka means for the client that
// got it. Every error is in exactly one of three classes:
//
//   - Fenced: this producer may never commit again. A newer producer owns
//     the transactional id, or the coordinator no longer knows this
//     producer's id. The one safe way on is to stop and let a new producer
//     (a new InitProducerId) take over: the publisher leaves PRIMARY, the
//     Kafka backend's holder leaves the role, a worker's copy stops.
//   - Fatal: the brokers refuse this client's configuration or credentials
//     (an ACL, a SASL login, a transaction timeout above the broker's
//     maximum, a record above its size limit). Trying again cannot succeed
//     until an operator changes them, so a caller says so (see Explain).
//   - Retriable: everything else. Kafka is unreachable, a leader or a
//     coordinator moves, a transaction was aborted or its outcome is
//     unknown: try again after a backoff.
//
// Fenced comes first: a refused transactional id is an authorization error
// too, but it means that this producer may never commit.
package kafkaerr

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrFenced marks an error after which a producer, or the copy or member
// that writes with it, may never commit again; Fenced reports true for any
// error that wraps it.
var ErrFenced = errors.New("fenced")

// fenced are the answers after which a producer may never commit again.
// Kafka and kfake answer a fenced producer with several codes depending on
// the request and its sequence, so the whole family counts.
var fenced = []error{
	ErrFenced,
	// A newer producer with the same transactional id bumped the epoch.
	kerr.ProducerFenced,
	kerr.InvalidProducerEpoch,
	// The fenced producer's transaction end, in some sequences.
	kerr.InvalidTxnState,
	// The rest of a batched request of which a part was fenced.
	kerr.OperationNotAttempted,
	// This principal may not use the transactional id: it can never commit
	// under it (docs/operations.md, the worker's ACLs).
	kerr.TransactionalIDAuthorizationFailed,
	// The coordinator does not know this producer id for the transactional
	// id: a newer producer got a new id once the epoch ran out, or the
	// coordinator expired or lost it. The client's own recovery of it is
	// not possible on every protocol version, and never takes the id back
	// from a newer producer: the producer is created anew instead.
	kerr.InvalidProducerIDMapping,
}

// fatal are the answers that no retry can change until an operator does.
var fatal = []error{
	kerr.TopicAuthorizationFailed,
	kerr.GroupAuthorizationFailed,
	kerr.ClusterAuthorizationFailed,
	kerr.DelegationTokenAuthorizationFailed,
	kerr.SaslAuthenticationFailed,
	kerr.UnsupportedSaslMechanism,
	kerr.IllegalSaslState,
	kerr.SecurityDisabled,
	kerr.InvalidTransactionTimeout,
	kerr.UnsupportedVersion,
	kerr.UnsupportedForMessageFormat,
	kerr.UnsupportedCompressionType,
	kerr.InvalidTopicException,
	kerr.InvalidReplicationFactor,
	kerr.InvalidConfig,
	kerr.PolicyViolation,
	kerr.InvalidRequiredAcks,
	kerr.MessageTooLarge,
	kerr.RecordListTooLarge,
}

func isAny(err error, targets []error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// Fenced reports whether err means that the producer that got it may never
// commit again: it must stop, and a new producer take over.
func Fenced(err error) bool { return err != nil && isAny(err, fenced) }

// Fatal reports whether err means that the brokers refuse the client's
// configuration or credentials, which only an operator can change. A
// fencing error is not Fatal.
func Fatal(err error) bool { return err != nil && !Fenced(err) && isAny(err, fatal) }

// Retriable reports whether err is worth trying again after a backoff:
// any error that is neither Fenced nor Fatal.
func Retriable(err error) bool { return err != nil && !Fenced(err) && !isAny(err, fatal) }

// Explain returns err, prefixed with what an operator must do when err is
// Fatal; any other err unchanged. Callers that keep retrying a Fatal error
// (the broker side may change while they run) log it through Explain.
func Explain(err error) error {
	if !Fatal(err) {
		return err
	}
	return fmt.Errorf("kafka refuses this client's configuration or credentials; retrying cannot succeed until they change (check the ACLs, the SASL user and the topic and broker settings): %w", err)
}
