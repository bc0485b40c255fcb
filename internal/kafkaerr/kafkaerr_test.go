package kafkaerr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestClasses covers every code the publisher, the Kafka backend and the
// worker ever counted as fenced, the codes they retry, and the refusals
// that only an operator can lift.
func TestClasses(t *testing.T) {
	const (
		fenced = iota
		retriable
		fatal
		none
	)
	cases := []struct {
		err  error
		want int
	}{
		// The fencing family: the union of what the publisher and the
		// worker each counted before.
		{kerr.ProducerFenced, fenced},
		{kerr.InvalidProducerEpoch, fenced},
		{kerr.InvalidTxnState, fenced},
		{kerr.OperationNotAttempted, fenced},
		{kerr.TransactionalIDAuthorizationFailed, fenced},
		{kerr.InvalidProducerIDMapping, fenced},
		{ErrFenced, fenced},
		{fmt.Errorf("commit: %w", kerr.ProducerFenced), fenced},
		{fmt.Errorf("produce: %w", fmt.Errorf("batch: %w", kerr.InvalidProducerEpoch)), fenced},
		{errors.Join(errors.New("flush"), kerr.InvalidTxnState), fenced},
		{fmt.Errorf("stop: %w", ErrFenced), fenced},
		{fmt.Errorf("%w: the copy was taken away", ErrFenced), fenced},
		{errors.Join(kerr.TopicAuthorizationFailed, kerr.ProducerFenced), fenced},

		// What the callers retry.
		{kerr.NotLeaderForPartition, retriable},
		{kerr.CoordinatorNotAvailable, retriable},
		{kerr.CoordinatorLoadInProgress, retriable},
		{kerr.NotCoordinator, retriable},
		{kerr.ConcurrentTransactions, retriable},
		{kerr.UnknownServerError, retriable},
		{kerr.RequestTimedOut, retriable},
		{kerr.TransactionAbortable, retriable},
		{kerr.InvalidRecord, retriable},
		{kerr.UnknownProducerID, retriable},
		{kerr.UnknownTopicOrPartition, retriable},
		{kerr.OffsetOutOfRange, retriable},
		{kerr.GroupIDNotFound, retriable},
		{kerr.TopicAlreadyExists, retriable},
		{kgo.ErrRecordTimeout, retriable},
		{io.EOF, retriable},
		{context.Canceled, retriable},
		{context.DeadlineExceeded, retriable},
		{fmt.Errorf("commit: %w", kerr.NotCoordinator), retriable},
		{errors.New("PRODUCER_FENCED"), retriable}, // text alone is not the error
		{errors.New("TOPIC_AUTHORIZATION_FAILED"), retriable},

		// Refusals of the configuration or the credentials.
		{kerr.TopicAuthorizationFailed, fatal},
		{kerr.GroupAuthorizationFailed, fatal},
		{kerr.ClusterAuthorizationFailed, fatal},
		{kerr.DelegationTokenAuthorizationFailed, fatal},
		{kerr.SaslAuthenticationFailed, fatal},
		{kerr.UnsupportedSaslMechanism, fatal},
		{kerr.IllegalSaslState, fatal},
		{kerr.SecurityDisabled, fatal},
		{kerr.InvalidTransactionTimeout, fatal},
		{kerr.UnsupportedVersion, fatal},
		{kerr.UnsupportedForMessageFormat, fatal},
		{kerr.UnsupportedCompressionType, fatal},
		{kerr.InvalidTopicException, fatal},
		{kerr.InvalidReplicationFactor, fatal},
		{kerr.InvalidConfig, fatal},
		{kerr.PolicyViolation, fatal},
		{kerr.InvalidRequiredAcks, fatal},
		{kerr.MessageTooLarge, fatal},
		{kerr.RecordListTooLarge, fatal},
		{fmt.Errorf("bad password: %w", kerr.SaslAuthenticationFailed), fatal},
		{fmt.Errorf("creating xce.t.coord: %w", kerr.TopicAuthorizationFailed), fatal},

		{nil, none},
	}
	for _, tc := range cases {
		got := [3]bool{Fenced(tc.err), Retriable(tc.err), Fatal(tc.err)}
		var want [3]bool
		if tc.want != none {
			want[tc.want] = true
		}
		if got != want {
			t.Errorf("%v: Fenced, Retriable, Fatal = %v, want %v", tc.err, got, want)
		}
	}
}

func TestExplain(t *testing.T) {
	for _, err := range []error{nil, kerr.ProducerFenced, kerr.NotCoordinator, io.EOF} {
		if got := Explain(err); got != err {
			t.Errorf("Explain(%v) = %v, want it unchanged", err, got)
		}
	}
	err := fmt.Errorf("init producer id: %w", kerr.TopicAuthorizationFailed)
	got := Explain(err)
	if !errors.Is(got, kerr.TopicAuthorizationFailed) || !Fatal(got) {
		t.Errorf("Explain(%v) = %v: no longer the same error", err, got)
	}
	if !strings.Contains(got.Error(), "check the ACLs") || !strings.HasSuffix(got.Error(), err.Error()) {
		t.Errorf("Explain(%v) = %q: does not say what to check, or drops the error", err, got)
	}
}
