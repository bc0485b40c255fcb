package kafkaha

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/xce/xce/internal/kafkaopts"
	"github.com/xce/xce/internal/testutil"
)

// Every client of a member (coordination, state tail, holder, topics)
// authenticates: against a broker that requires SASL, a member holds the
// role and writes, and another, with another mechanism, follows.
func TestMembersAuthenticate(t *testing.T) {
	t.Cleanup(func() { checkNoLeaks(t) })
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser(kafkaopts.ScramSHA512, "xce", "pw-512"), kfake.Superuser(kafkaopts.Plain, "xce", "pw-plain"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	with := func(mech, pw string) func(*Config) {
		p := filepath.Join(t.TempDir(), "password")
		if err := os.WriteFile(p, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return func(cfg *Config) {
			cfg.Security = kafkaopts.Security{SASL: kafkaopts.SASL{Mechanism: mech, Username: "xce", PasswordFile: p}}
		}
	}
	a := startMemberWith(t, brokers, "a", "", 200, with(kafkaopts.ScramSHA512, "pw-512"))
	becomePrimary(t, a)
	b := startMemberWith(t, brokers, "b", "", 200, with(kafkaopts.Plain, "pw-plain"))
	for i := range 5 {
		submit(t, a, fmt.Sprintf("t%d", i))
	}
	testutil.Eventually(t, 10*time.Second, "b to apply a's writes", func() bool { return b.fsm.NumTasks() == 5 })
}
