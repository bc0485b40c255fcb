package fence_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/xce/xce/fence"
	"github.com/xce/xce/internal/kafkaopts"
	"github.com/xce/xce/internal/testutil"
)

// A broker that requires SASL refuses a publisher with the wrong password,
// which says why in its log without showing the password, and takes the
// events of one with the right password.
func TestPublishesThroughSASL(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic),
		kfake.EnableSASL(), kfake.Superuser(kafkaopts.ScramSHA256, "xce", "right-pass"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	dir := t.TempDir()
	pwFile := func(name, pw string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sec := func(file string) kafkaopts.Security {
		return kafkaopts.Security{SASL: kafkaopts.SASL{Mechanism: kafkaopts.ScramSHA256, Username: "xce", PasswordFile: file}}
	}

	n := newNode(t, 2)
	n.submit("a", "b")

	var logged testutil.SyncBuffer
	wrong := newPublisher(t, brokers, n, "wrong", nil, func(c *fence.Config) {
		c.Security = sec(pwFile("wrong", "wrong-pass"))
		c.Logger = zerolog.New(&logged)
	})
	r := establish(t, wrong, 2)
	testutil.Eventually(t, 10*time.Second, "the refused publisher did not say why", func() bool {
		_, _, st := wrong.Status()
		return st == fence.StateAcquiring && strings.Contains(logged.String(), "kafka sasl: the broker refused the authentication")
	})
	r.revoke()
	if got := strings.Count(logged.String(), "kafka sasl:"); got != 1 {
		t.Errorf("%d refusals logged, want 1 (the next a minute later)", got)
	}
	if strings.Contains(logged.String(), "wrong-pass") {
		t.Fatalf("the log shows the password:\n%s", logged.String())
	}
	if !strings.Contains(logged.String(), `"sasl_username":"xce"`) {
		t.Errorf("the refusal does not name the user:\n%s", logged.String())
	}

	right := sec(pwFile("right", "right-pass"))
	p := newPublisher(t, brokers, n, "right", nil, func(c *fence.Config) { c.Security = right })
	establish(t, p, 2)
	waitDrained(t, p)
	conn, err := right.Opts(zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	last, err := fence.LastPublished(ctx, brokers, topic, conn...)
	if err != nil {
		t.Fatal(err)
	}
	evs := n.allEvents()
	if want := evs[len(evs)-1].Index; last != want {
		t.Fatalf("last published index %d, want %d", last, want)
	}
	if _, err := fence.LastPublished(ctx, brokers, topic); err == nil {
		t.Error("LastPublished without SASL read a broker that requires it")
	}
}

// A publisher whose password file is missing does not start.
func TestNewRefusesAMissingPasswordFile(t *testing.T) {
	n := newNode(t, 1)
	cfg := fence.Config{Brokers: []string{"127.0.0.1:1"}, Topic: topic, TransactionalID: txnID,
		Security: kafkaopts.Security{SASL: kafkaopts.SASL{Mechanism: kafkaopts.Plain, Username: "u", PasswordFile: "/nonexistent/pw"}}}
	if _, err := fence.New(cfg, n.fsm, n.hooks("p"), nil); err == nil || !strings.Contains(err.Error(), "/nonexistent/pw") {
		t.Fatalf("New: %v, want an error naming the password file", err)
	}
}
