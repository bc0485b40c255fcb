package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/fence"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/tlsconf"
)

// Kafka over TLS with SASL end to end (docs/operations.md, "Kafka: TLS and
// SASL"): a kafka-dev broker that serves TLS and requires SASL, a node
// publishing through it with SCRAM-SHA-512, and `xce events tail` reading
// the events back with PLAIN; with a wrong password it is refused and says
// so.
func TestKafkaSASL(t *testing.T) {
	dir := t.TempDir()
	if err := tlsconf.CreateCA(dir, "kafka"); err != nil {
		t.Fatal(err)
	}
	ca, _ := tlsconf.CAFiles(dir)
	cert, key, err := tlsconf.CreateCert(dir, tlsconf.CertRequest{
		ID: tlsconf.Identity{Cluster: "kafka", Kind: tlsconf.KindNode, Name: "broker"}, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	pw, wrong := filepath.Join(dir, "password"), filepath.Join(dir, "wrong")
	if err := os.WriteFile(pw, []byte("kafka-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wrong, []byte("not-the-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k := startKafkaDev(t, false, "--sasl-user", "xce", "--sasl-password-file", pw, "--tls-cert-file", cert, "--tls-key-file", key)

	c := newCluster(t, 1, WithLogLevel("info"), WithConfig(func(cfg *configs.Config) {
		cfg.Kafka.Brokers = []string{k.Addr}
		cfg.Kafka.TLS.CAFile = ca
		cfg.Kafka.SASL = configs.KafkaSASL{Mechanism: "SCRAM-SHA-512", Username: "xce", PasswordFile: pw}
	}))
	c.Start(0)
	c.WaitRoles(raceSlack(15 * time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), raceSlack(30*time.Second))
	defer cancel()
	ids := []string{"sasl-a", "sasl-b", "sasl-c"}
	for _, id := range ids {
		if _, err := c.Client().Submit(ctx, client.Task{ID: id}); err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
	}
	if err := testutil.Poll(raceSlack(20*time.Second), pollEvery, func() error {
		s, err := c.Status(0)
		if err != nil {
			return err
		}
		if s.KafkaState != fence.StatePublishing || s.OutboxLag != 0 {
			return fmt.Errorf("kafka state %q, outbox lag %d", s.KafkaState, s.OutboxLag)
		}
		return nil
	}); err != nil {
		t.Fatalf("the node did not publish through TLS and SASL: %v", err)
	}

	tailArgs := []string{"events", "tail", "--brokers", k.Addr, "--from-start", "--json", "--tls-ca-file", ca,
		"--sasl-mechanism", "PLAIN", "--sasl-user", "xce"}
	tail := startXCE(t, append(tailArgs, "--sasl-password-file", pw)...)
	testutil.Eventually(t, raceSlack(20*time.Second), "events tail did not print every submitted task", func() bool {
		out := tail.stdout()
		for _, id := range ids {
			if !strings.Contains(out, `"task_id":"`+id+`"`) {
				return false
			}
		}
		return true
	})
	tail.stop(t)

	refused := startXCE(t, append(tailArgs, "--sasl-password-file", wrong)...)
	testutil.Eventually(t, raceSlack(20*time.Second), "events tail with a wrong password did not say it was refused", func() bool {
		return strings.Contains(refused.stderr(), "kafka sasl: the broker refused the authentication")
	})
	refused.stop(t)
	if out := refused.stdout(); out != "" {
		t.Errorf("events tail with a wrong password printed events:\n%s", out)
	}
	for name, text := range map[string]string{"node log": c.RunLog(0), "events tail": tail.stderr() + refused.stderr()} {
		for _, secret := range []string{"kafka-s3cret", "not-the-password"} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s shows a password", name)
			}
		}
	}
}

// xceProc is an xce command running in the background, its output kept.
type xceProc struct {
	cmd      *exec.Cmd
	out, err testutil.SyncBuffer
	done     chan struct{}
}

// startXCE starts the xce binary with args; the cleanup kills it.
func startXCE(t *testing.T, args ...string) *xceProc {
	t.Helper()
	p := &xceProc{cmd: exec.Command(xceBin, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("xce %s: %v", strings.Join(args, " "), err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *xceProc) stdout() string { return p.out.String() }

func (p *xceProc) stderr() string { return p.err.String() }

// stop interrupts the command and waits for it to exit.
func (p *xceProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Errorf("xce %s: still running 10s after SIGINT", strings.Join(p.cmd.Args[1:], " "))
	}
}
