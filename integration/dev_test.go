package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/client"
	"github.com/xce/xce/fence"
	"github.com/xce/xce/internal/kafkaopts"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/tlsconf"
	"github.com/xce/xce/worker/kvworker"
)

// `xce dev` as one runs it (docs/operations.md, "A local cluster: xce
// dev"): the real command with its broker, nodes and Kafka-backed workers
// on free ports. Each test takes 5 to 20 s (up to twice that under -race on
// a loaded 2-core machine) and is skipped with -short.

// devRestartAfter is the tests' --restart-after. A worker that registers
// again within its session keeps its tasks, so it must come back only
// after they moved: the session (3s) and grant margin (600ms) leave ample
// room.
const devRestartAfter = 10 * time.Second

// devTasks are the tasks xce dev submits for its Kafka workers.
const devTasks = 6

// devProc is a running `xce dev`, its output kept. Its cleanup leaves no
// process of it running and, on failure, prints its output and the tail
// of every log.
type devProc struct {
	t         *testing.T
	dir       string
	addrs     []string
	kafkaAddr string
	cmd       *exec.Cmd
	out, err  testutil.SyncBuffer
	done      chan struct{}
	clean     bool // exited by itself, every child checked gone
}

// startDev runs `xce dev` with a temp --dir, free ports and args.
func startDev(t *testing.T, nodes int, args ...string) *devProc {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a whole dev cluster")
	}
	base := freeBasePort(t, nodes)
	kafkaPort := freePorts(t, 1)[0]
	for kafkaPort > base && kafkaPort <= base+100+nodes {
		kafkaPort = freePorts(t, 1)[0]
	}
	d := &devProc{t: t, dir: t.TempDir(), kafkaAddr: fmt.Sprintf("127.0.0.1:%d", kafkaPort), done: make(chan struct{})}
	for i := 1; i <= nodes; i++ {
		d.addrs = append(d.addrs, fmt.Sprintf("127.0.0.1:%d", base+i))
	}
	args = append([]string{"dev", "--dir", d.dir, "--nodes", strconv.Itoa(nodes), "--base-port", strconv.Itoa(base),
		"--kafka-addr", d.kafkaAddr}, args...)
	d.cmd = exec.Command(xceBin, args...)
	d.cmd.Stdout, d.cmd.Stderr = &d.out, &d.err
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = d.cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(d.cleanup)
	return d
}

// freeBasePort returns a port p with p+1 … p+n and p+101 … p+100+n free:
// xce dev's client and peer ports for --base-port p.
func freeBasePort(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		base := freePorts(t, 1)[0] - 1
		if base+100+n > 65535 {
			continue
		}
		var held []net.Listener
		for i := 1; i <= n; i++ {
			for _, port := range []int{base + i, base + 100 + i} {
				if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
					held = append(held, l)
				}
			}
		}
		for _, l := range held {
			l.Close()
		}
		if len(held) == 2*n {
			return base
		}
	}
	t.Fatal("no free base port")
	return 0
}

func (d *devProc) cleanup() {
	if !d.clean {
		_ = d.cmd.Process.Kill()
		<-d.done
		// The test binary is a child subreaper: the children of a killed
		// xce dev are its own, to kill and reap (and only those: a pid
		// xce dev reaped may name another process by now).
		for _, pid := range d.allPids() {
			if parentOf(pid) == os.Getpid() && syscall.Kill(pid, syscall.SIGKILL) == nil {
				_, _ = syscall.Wait4(pid, nil, 0, nil)
			}
		}
	}
	if !d.t.Failed() {
		return
	}
	d.t.Logf("---- xce dev stdout ----\n%s\n---- stderr ----\n%s", d.out.String(), d.err.String())
	logs, _ := filepath.Glob(filepath.Join(d.dir, "logs", "*.log"))
	for _, l := range logs {
		d.t.Logf("---- last 30 lines of %s ----\n%s", l, tailLines(l, 30, 500))
	}
}

// parentOf is the parent of process pid; 0 when there is none.
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid …; comm may hold spaces and parentheses.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// pidLine is a line of xce dev naming a child's process: its start
// ("w1  kafka worker, … pid 123") or a restart ("w1 started again, pid 456").
var pidLine = regexp.MustCompile(`(?m)^(\S+)\s.*\bpid (\d+)$`)

// pids are the processes xce dev printed for the child name, in order.
func (d *devProc) pids(name string) []int {
	var out []int
	for _, m := range pidLine.FindAllStringSubmatch(d.out.String(), -1) {
		if m[1] == name {
			pid, _ := strconv.Atoi(m[2])
			out = append(out, pid)
		}
	}
	return out
}

// allPids are every child process xce dev printed.
func (d *devProc) allPids() []int {
	var out []int
	for _, m := range pidLine.FindAllStringSubmatch(d.out.String(), -1) {
		pid, _ := strconv.Atoi(m[2])
		out = append(out, pid)
	}
	return out
}

// waitReady waits until xce dev has started everything and printed its
// examples.
func (d *devProc) waitReady() {
	d.t.Helper()
	err := testutil.Poll(raceSlack(60*time.Second), pollEvery, func() error {
		select {
		case <-d.done:
			return errors.New("xce dev exited")
		default:
		}
		if !strings.Contains(d.out.String(), "Ctrl-C stops the cluster.") {
			return errors.New("still starting")
		}
		return nil
	})
	if err != nil {
		d.t.Fatalf("xce dev did not start: %v", err)
	}
}

// client is a client of the dev cluster with creds.
func (d *devProc) client(creds client.Credentials) *client.Client {
	d.t.Helper()
	cl, err := client.New(d.addrs, client.Options{Credentials: creds})
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(cl.Close)
	return cl
}

// actives returns each task's active worker ("" for none).
func actives(cl *client.Client) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := cl.GetAssignment(ctx, false)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, ta := range a.Tasks {
		m[ta.Placement.TaskId] = ta.Placement.Active
	}
	return m, nil
}

// waitActives waits until all of xce dev's tasks have an active for which
// ok holds, and returns them.
func (d *devProc) waitActives(cl *client.Client, within time.Duration, what string, ok func(worker string) bool) map[string]string {
	d.t.Helper()
	var m map[string]string
	err := testutil.Poll(within, pollEvery, func() error {
		var err error
		if m, err = actives(cl); err != nil {
			return err
		}
		for p := range devTasks {
			task := fmt.Sprintf("%s%d", kvworker.TaskPrefix, p)
			if w := m[task]; w == "" || !ok(w) {
				return fmt.Errorf("%s: active %q", task, w)
			}
		}
		return nil
	})
	if err != nil {
		d.t.Fatalf("%s: not within %v: %v", what, within, err)
	}
	return m
}

// interrupt sends SIGINT, as Ctrl-C does, and waits for the exit; then
// every child xce dev printed must be gone.
func (d *devProc) interrupt() {
	d.t.Helper()
	start := time.Now()
	if err := d.cmd.Process.Signal(os.Interrupt); err != nil {
		d.t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(raceSlack(40 * time.Second)):
		d.t.Fatalf("xce dev still runs %v after SIGINT", raceSlack(40*time.Second))
	}
	if code := d.cmd.ProcessState.ExitCode(); code != 0 {
		d.t.Errorf("xce dev exited %d after SIGINT, want 0", code)
	}
	d.t.Logf("xce dev stopped %v after SIGINT", time.Since(start).Round(time.Millisecond))
	if !strings.HasSuffix(d.out.String(), "dev cluster stopped\n") {
		d.t.Errorf("xce dev did not say it stopped the cluster")
	}
	pids := d.allPids()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			d.t.Errorf("pid %d still exists after xce dev exited (%v)", pid, err)
			return
		}
	}
	d.clean = true
}

// A worker of xce dev killed with SIGKILL is reported with its status and
// its log's tail; the cluster keeps serving, the worker's tasks get other
// actives, and the worker is started again and registers. Ctrl-C then
// stops everything, with exit status 0, and leaves no process behind.
func TestDevSurvivesAKilledWorker(t *testing.T) {
	d := startDev(t, 3, "--workers", "3", "--restart-after", devRestartAfter.String())
	d.waitReady()
	cl := d.client(client.Credentials{})
	// The first worker to register takes every task; the others get
	// theirs once they caught up. Kill one when the actives are balanced,
	// so that its tasks move because it died.
	balanced := testutil.Poll(raceSlack(60*time.Second), pollEvery, func() error {
		m, err := actives(cl)
		if err != nil {
			return err
		}
		per := map[string]int{}
		for _, w := range m {
			per[w]++
		}
		if len(m) != devTasks || len(per) != 3 || per[""] > 0 || slices.Max(slices.Collect(maps.Values(per))) != devTasks/3 {
			return fmt.Errorf("actives %v", m)
		}
		return nil
	})
	if balanced != nil {
		t.Fatalf("the actives are not two on each worker: %v", balanced)
	}
	before, err := actives(cl)
	if err != nil {
		t.Fatal(err)
	}
	victim := before[kvworker.TaskPrefix+"0"]
	pids := d.pids(victim)
	if len(pids) != 1 {
		t.Fatalf("xce dev printed pids %v for %s", pids, victim)
	}
	killed := time.Now()
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	logPath := filepath.Join(d.dir, "logs", victim+".log")
	report := victim + " exited (signal: killed); the last lines of " + logPath + ":\n"
	testutil.Eventually(t, 10*time.Second, "xce dev reports the exit", func() bool {
		return strings.Contains(d.out.String(), report+"    | ")
	})
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	out := d.out.String()
	tail := out[strings.Index(out, report)+len(report):]
	// A long line is shown shortened, ending in "…".
	if line, _, _ := strings.Cut(strings.TrimPrefix(tail, "    | "), "\n"); !strings.Contains(string(log), strings.TrimSuffix(line, "…")) {
		t.Errorf("the report's first log line %q is not in %s", line, logPath)
	}

	// A worker that registers again within its session keeps its tasks:
	// they must move before --restart-after brings it back.
	d.waitActives(cl, devRestartAfter-time.Since(killed), "the killed worker's tasks have other actives",
		func(w string) bool { return w != victim })
	t.Logf("%s's tasks moved %v after the kill", victim, time.Since(killed).Round(time.Millisecond))
	primaries := 0
	for _, a := range d.addrs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := cl.Status(ctx, a)
		cancel()
		if err != nil {
			t.Errorf("status of %s: %v", a, err)
		} else if s.Role == xcev1.Role_ROLE_PRIMARY {
			primaries++
		}
	}
	if primaries != 1 {
		t.Errorf("%d primaries", primaries)
	}

	testutil.Eventually(t, devRestartAfter+raceSlack(10*time.Second), "xce dev starts the worker again", func() bool {
		return len(d.pids(victim)) == 2
	})
	if got := d.pids(victim); got[1] == got[0] {
		t.Errorf("the restarted %s has the killed one's pid %d", victim, got[0])
	}
	testutil.Eventually(t, raceSlack(15*time.Second), "the restarted worker registers", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ws, err := cl.ListWorkers(ctx)
		return err == nil && slices.ContainsFunc(ws.Workers, func(w *xcev1.WorkerInfo) bool { return w.WorkerId == victim })
	})
	d.interrupt()
}

// Under --tls the dev broker requires TLS and SASL: a plaintext client and
// a TLS client without SASL are refused, while the node publishes through
// it, the worker's tasks commit input, and nothing printed holds the
// password.
func TestDevTLSSecuresTheBroker(t *testing.T) {
	d := startDev(t, 1, "--tls", "--workers", "1")
	d.waitReady()
	tlsDir := filepath.Join(d.dir, "tls")
	ca, _ := tlsconf.CAFiles(tlsDir)
	token, err := os.ReadFile(filepath.Join(tlsDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	cl := d.client(client.Credentials{CAFile: ca, Token: strings.TrimSpace(string(token))})
	testutil.Eventually(t, raceSlack(30*time.Second), "the node publishes to the broker", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := cl.Status(ctx, d.addrs[0])
		return err == nil && s.KafkaState == fence.StatePublishing
	})
	d.waitActives(cl, raceSlack(30*time.Second), "every task is active on w1", func(w string) bool { return w == "w1" })

	pwFile := filepath.Join(tlsDir, "kafka-password")
	secured := kafkaopts.Security{TLS: kafkaopts.TLS{Files: tlsconf.Files{CA: ca}},
		SASL: kafkaopts.SASL{Mechanism: kafkaopts.ScramSHA512, Username: "xce", PasswordFile: pwFile}}
	adm := d.kafkaAdmin(secured)
	testutil.Eventually(t, raceSlack(30*time.Second), "every task commits input", func() bool {
		for p := range devTasks {
			if committedOffset(adm, fmt.Sprintf("%s%d", kvworker.TaskPrefix, p), int32(p)) <= 0 {
				return false
			}
		}
		return true
	})
	for name, sec := range map[string]kafkaopts.Security{
		"plaintext":         {},
		"TLS without SASL":  {TLS: secured.TLS},
		"SASL without TLS":  {SASL: secured.SASL},
		"TLS, a wrong user": {TLS: secured.TLS, SASL: kafkaopts.SASL{Mechanism: kafkaopts.ScramSHA512, Username: "nobody", PasswordFile: pwFile}},
		"TLS and SASL (ok)": secured,
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := d.kafkaAdmin(sec).ListTopics(ctx)
		cancel()
		if ok := strings.HasSuffix(name, "(ok)"); (err == nil) != ok {
			t.Errorf("%s: list topics: %v", name, err)
		}
	}

	pw, err := os.ReadFile(pwFile)
	if err != nil {
		t.Fatal(err)
	}
	out := d.out.String()
	if strings.Contains(out, strings.TrimSpace(string(pw))) {
		t.Error("xce dev printed the Kafka password")
	}
	tail := fmt.Sprintf("xce events tail --brokers %s --from-start --tls-ca-file %s --sasl-mechanism SCRAM-SHA-512 --sasl-user xce --sasl-password-file %s\n",
		d.kafkaAddr, ca, pwFile)
	if !strings.Contains(out, tail) {
		t.Errorf("xce dev did not print %q", tail)
	}
	d.interrupt()
}

// kafkaAdmin is an admin client of the dev broker that connects with sec.
func (d *devProc) kafkaAdmin(sec kafkaopts.Security) *kadm.Client {
	d.t.Helper()
	conn, err := sec.Opts(zerolog.Nop())
	if err != nil {
		d.t.Fatal(err)
	}
	kc, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(d.kafkaAddr)}, conn...)...)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(kc.Close)
	return kadm.NewClient(kc)
}
