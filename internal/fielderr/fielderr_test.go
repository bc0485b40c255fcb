package fielderr

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestSnake(t *testing.T) {
	for path, want := range map[string]string{
		"HeartbeatTimeout":         "heartbeat_timeout",
		"MaxRPCSize":               "max_rpc_size",
		"RPCTimeout":               "rpc_timeout",
		"TransactionalID":          "transactional_id",
		"FDHeadroom":               "fd_headroom",
		"SASL.PasswordFile":        "sasl.password_file",
		"TLS.Files.CA":             "tls.files.ca",
		"Assign.MaxWarmupReplicas": "assign.max_warmup_replicas",
		"Topic":                    "topic",
		"Retry2Max":                "retry2_max",
	} {
		if got := Snake(path); got != want {
			t.Errorf("Snake(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestText(t *testing.T) {
	yaml := map[string]string{
		"ElectionTimeout":  "raft.election_timeout",
		"HeartbeatTimeout": "raft.heartbeat_timeout",
		"TLS.Files.Cert":   "kafka.tls.cert_file",
		"TLS.Files.Key":    "kafka.tls.key_file",
	}
	name := func(p string) string { return yaml[p] }
	for _, tc := range []struct {
		e           *Error
		snake, text string
	}{
		{Errorf("ElectionTimeout", "must not be less than {HeartbeatTimeout} (%s < %s)", "1s", "2s"),
			"election_timeout: must not be less than heartbeat_timeout (1s < 2s)",
			"raft.election_timeout: must not be less than raft.heartbeat_timeout (1s < 2s)"},
		{Errorf("TLS.Files.Cert", "{.TLS.Files.Cert} and {.TLS.Files.Key} are set together"),
			"tls.files.cert: cert and key are set together",
			"kafka.tls.cert_file: cert_file and key_file are set together"},
		{Errorf("HeartbeatTimeout", "got %q", "{x}"), `heartbeat_timeout: got "{x}"`, `raft.heartbeat_timeout: got "{x}"`},
	} {
		if got := tc.e.Error(); got != tc.snake {
			t.Errorf("Error() = %q, want %q", got, tc.snake)
		}
		if got := tc.e.Text(name); got != tc.text {
			t.Errorf("Text = %q, want %q", got, tc.text)
		}
	}
}

func TestList(t *testing.T) {
	var l List
	if l.Err() != nil {
		t.Fatal("an empty List is an error")
	}
	l.Add("SessionTimeout", "must be at least %s", "500ms")
	var inner List
	inner.Add("MaxWarmupReplicas", "must be at least 1")
	inner.Add("ProbingRebalanceInterval", "must exceed {MaxWarmupReplicas}")
	l.AddUnder("Assign", inner.Err())
	l.AddUnder("Other", errors.New("not a field"))
	l.AddUnder("None", nil)
	want := "session_timeout: must be at least 500ms\n" +
		"assign.max_warmup_replicas: must be at least 1\n" +
		"assign.probing_rebalance_interval: must exceed assign.max_warmup_replicas\n" +
		"other: not a field"
	if got := l.Err().Error(); got != want {
		t.Errorf("Error()\n%s\nwant\n%s", got, want)
	}
	var fe *Error
	if !errors.As(l.Err(), &fe) || fe.Field != "SessionTimeout" {
		t.Errorf("errors.As finds %v", fe)
	}
}

func TestAll(t *testing.T) {
	sentinel := errors.New("invalid lease config")
	a, b, c := Errorf("A", "a"), Errorf("B", "b"), Errorf("C", "c")
	err := errors.Join(
		fmt.Errorf("%w: %w", sentinel, a),
		fmt.Errorf("wrapped: %w", List{b, c}),
		errors.New("no field"),
	)
	if got := All(err); !reflect.DeepEqual(got, []*Error{a, b, c}) {
		t.Errorf("All = %v", got)
	}
	if got := All(errors.New("plain")); got != nil {
		t.Errorf("All(plain) = %v", got)
	}
	if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), "invalid lease config: a: a") {
		t.Errorf("wrapping lost: %v", err)
	}
}
