package integration

// The client and peer ports' limits against a real xce process: request
// bodies that trickle in, silent connections and floods beyond the
// connection cap on the client port (also under a low RLIMIT_NOFILE), and
// oversized messages and silent connections on the peer port. Throughout,
// the node answers /healthz and a SubmitTask within a second; afterwards
// every acknowledged task is there, also after a restart, and the
// refusals show in /metrics.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"

	"github.com/xce/xce/client"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// answerWithin is how soon the node must answer /healthz and SubmitTask
// while it is under attack.
const answerWithin = time.Second

// Client limits of the attacked node: a low cap, so that floods go
// beyond it with a few hundred connections, and short timeouts, so that
// the test does not wait long.
const (
	testMaxConns      = 64
	testHealthReserve = 4
	testHeaderTimeout = time.Second
	testReadTimeout   = 2 * time.Second
)

func clientLimits(cfg *configs.Config) {
	l := &cfg.Limits.Client
	l.MaxConnections, l.HealthReserve = testMaxConns, testHealthReserve
	l.ReadHeaderTimeout = configs.Duration{Duration: testHeaderTimeout}
	l.ReadTimeout = configs.Duration{Duration: testReadTimeout}
	l.WriteTimeout = configs.Duration{Duration: 2 * time.Second}
}

// ---------------------------------------------------------------------------
// The prober: what a client sees while the node is attacked.

// prober asks a node for /healthz, each time on a new connection, and the
// cluster to SubmitTask, each answer due within answerWithin, until
// stopped.
type prober struct {
	t      *testing.T
	health string // URL of the /healthz probed
	cl     *client.Client
	stop   chan struct{}
	done   chan struct{}
	halt   sync.Once

	mu                   sync.Mutex
	rounds               int
	acked                []string
	failures             []string
	healthMax, submitMax time.Duration
}

func startProber(t *testing.T, c *Cluster, healthOf int, name string, submitTo ...string) *prober {
	t.Helper()
	p := &prober{
		t: t, health: "http://" + c.Node(healthOf).ClientAddr + "/healthz",
		cl:   c.ClientOf(submitTo...),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	// Warm up: the client's connection is open before any attack.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id := name + "-warmup"
	if _, err := p.cl.Submit(ctx, client.Task{ID: id}); err != nil {
		t.Fatalf("warm-up submit: %v", err)
	}
	p.acked = append(p.acked, id)
	go p.run(name)
	t.Cleanup(p.halted) // if the test ends early
	return p
}

// halted stops the prober and waits for it.
func (p *prober) halted() {
	p.halt.Do(func() { close(p.stop) })
	<-p.done
}

func (p *prober) run(name string) {
	defer close(p.done)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		hd, herr := p.probeHealth(hc)
		id := fmt.Sprintf("%s-%d", name, i)
		ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
		start := time.Now()
		_, serr := p.cl.Submit(ctx, client.Task{ID: id})
		sd := time.Since(start)
		cancel()
		p.mu.Lock()
		p.rounds++
		p.healthMax = max(p.healthMax, hd)
		if herr != nil {
			p.failures = append(p.failures, fmt.Sprintf("round %d: /healthz: %v after %v", i, herr, hd.Round(time.Millisecond)))
		}
		if serr != nil {
			p.failures = append(p.failures, fmt.Sprintf("round %d: SubmitTask %s: %v after %v", i, id, serr, sd.Round(time.Millisecond)))
		} else {
			p.acked = append(p.acked, id)
			p.submitMax = max(p.submitMax, sd)
		}
		p.mu.Unlock()
	}
}

// probeHealth GETs /healthz until it answers 200, within answerWithin: a
// connection closed at once because the reserve was full for an instant
// is tried again, as a health checker would.
func (p *prober) probeHealth(hc *http.Client) (time.Duration, error) {
	start := time.Now()
	var last error
	for time.Since(start) < answerWithin {
		ctx, cancel := context.WithTimeout(context.Background(), answerWithin-time.Since(start))
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.health, nil)
		resp, err := hc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				cancel()
				return time.Since(start), nil
			}
			err = fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		cancel()
		last = err
	}
	return time.Since(start), fmt.Errorf("no answer within %v: %w", answerWithin, last)
}

// finish stops the prober, fails the test on any late or missing answer,
// and returns the acknowledged task ids.
func (p *prober) finish() []string {
	p.t.Helper()
	p.halted()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.t.Logf("prober: %d rounds, %d acknowledged, slowest /healthz %v, slowest SubmitTask %v",
		p.rounds, len(p.acked), p.healthMax.Round(time.Millisecond), p.submitMax.Round(time.Millisecond))
	if len(p.failures) > 0 {
		p.t.Errorf("%d of %d rounds failed:\n%s", len(p.failures), p.rounds, strings.Join(p.failures, "\n"))
	}
	if p.rounds < 5 {
		p.t.Errorf("only %d rounds while under attack", p.rounds)
	}
	return p.acked
}

// checkAcked fails the test unless every acknowledged task is found by a
// linearizable read.
func checkAcked(t *testing.T, c *Cluster, ids []string) {
	t.Helper()
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	missing := 0
	for _, id := range ids {
		if _, err := cl.Get(ctx, id, false); err != nil {
			missing++
			if missing <= 5 {
				t.Errorf("acknowledged task %s: %v", id, err)
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d acknowledged tasks missing", missing, len(ids))
	}
}

// ---------------------------------------------------------------------------
// Attacks

// attack is a set of attacking connections; each records when the server
// closed it, measured from when the attack began.
type attack struct {
	name  string
	start time.Time
	wg    sync.WaitGroup

	mu     sync.Mutex
	conns  []net.Conn
	closed []time.Duration // per connection; -1 while open
	failed int             // could not connect
}

func newAttack(name string) *attack { return &attack{name: name, start: time.Now()} }

// open connects n times to addr, 32 dials at a time, and returns the
// connections it made.
func (a *attack) open(addr string, n int) []net.Conn {
	out := make([]net.Conn, n)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				a.mu.Lock()
				a.failed++
				a.mu.Unlock()
				return
			}
			out[i] = c
		}()
	}
	wg.Wait()
	var conns []net.Conn
	for _, c := range out {
		if c != nil {
			conns = append(conns, c)
		}
	}
	return conns
}

// watch records when the server closes c (end of stream or reset), reading
// and dropping what it sends, until the deadline.
func (a *attack) watch(c net.Conn, until time.Time) {
	a.mu.Lock()
	idx := len(a.conns)
	a.conns = append(a.conns, c)
	a.closed = append(a.closed, -1)
	a.mu.Unlock()
	a.wg.Go(func() {
		_ = c.SetReadDeadline(until)
		_, err := io.Copy(io.Discard, c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return
		}
		a.mu.Lock()
		a.closed[idx] = time.Since(a.start)
		a.mu.Unlock()
	})
}

// wait waits for every watch and closes the connections; it returns how
// many the server closed, how many of those within prompt, and the latest
// close.
func (a *attack) wait(prompt time.Duration) (closed, promptly int, last time.Duration) {
	a.wg.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, d := range a.closed {
		_ = a.conns[i].Close()
		if d < 0 {
			continue
		}
		closed++
		if d <= prompt {
			promptly++
		}
		last = max(last, d)
	}
	return closed, promptly, last
}

func (a *attack) report(t *testing.T, prompt time.Duration) (closed, promptly int, last time.Duration) {
	t.Helper()
	closed, promptly, last = a.wait(prompt)
	t.Logf("%s: %d connections (%d failed to connect), %d closed by the node (%d within %v), the last after %v",
		a.name, len(a.conns), a.failed, closed, promptly, prompt, last.Round(time.Millisecond))
	return closed, promptly, last
}

// slowBodies opens n connections that each send a SubmitTask's headers
// announcing a 1000-byte body, then a byte of it every `every`.
func slowBodies(addr string, n int, every, bound time.Duration) *attack {
	a := newAttack(fmt.Sprintf("%d slow bodies", n))
	until := time.Now().Add(bound)
	for _, c := range a.open(addr, n) {
		a.trickle(c, addr, every, until)
	}
	return a
}

// slowBodiesPaced is slowBodies one connection at a time, pace apart, so
// that each has sent its headers (and keeps a connection busy) before the
// next arrives.
func slowBodiesPaced(addr string, n int, every, pace, bound time.Duration) *attack {
	a := newAttack(fmt.Sprintf("%d slow bodies, %v apart", n, pace))
	until := time.Now().Add(bound)
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			a.failed++
			continue
		}
		a.trickle(c, addr, every, until)
		time.Sleep(pace) // the attack's own pacing, not a wait for a condition
	}
	return a
}

// trickle watches c and sends a SubmitTask on it whose body trickles in.
func (a *attack) trickle(c net.Conn, addr string, every time.Duration, until time.Time) {
	hdr := "POST /xce.v1.ControllerService/SubmitTask HTTP/1.1\r\nHost: " + addr +
		"\r\nContent-Type: application/proto\r\nContent-Length: 1000\r\n\r\n"
	a.watch(c, until)
	a.wg.Go(func() {
		if _, err := io.WriteString(c, hdr); err != nil {
			return
		}
		tick := time.NewTicker(every)
		defer tick.Stop()
		for range 999 {
			if time.Now().After(until) {
				return
			}
			<-tick.C
			if _, err := c.Write([]byte{'x'}); err != nil {
				return
			}
		}
	})
}

// silent opens n connections that send nothing.
func silent(addr string, n int, bound time.Duration) *attack {
	a := newAttack(fmt.Sprintf("%d silent connections to %s", n, addr))
	until := time.Now().Add(bound)
	for _, c := range a.open(addr, n) {
		a.watch(c, until)
	}
	return a
}

// ---------------------------------------------------------------------------
// Observing the node

// metricSample is the value of metric{label="value"} on node i's /metrics
// (0 when absent).
func metricSample(t *testing.T, c *Cluster, i int, metric, label, value string) float64 {
	t.Helper()
	code, body, err := c.HTTPGet(i, "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d %v", code, err)
	}
	prefix := fmt.Sprintf("%s{%s=%q} ", metric, label, value)
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			return v
		}
	}
	return 0
}

var vmRSS = regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB`)

// rssOf is the resident set size of process pid, in bytes.
func rssOf(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	m := vmRSS.FindSubmatch(b)
	if m == nil {
		return 0, errors.New("no VmRSS in /proc/PID/status")
	}
	kb, err := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10, err
}

// rssPeak samples a process's RSS every 50 ms until stopped and returns
// the largest.
func rssPeak(t *testing.T, pid int) (stop func() int64) {
	done := make(chan struct{})
	res := make(chan int64, 1)
	var once sync.Once
	var peak int64
	stop = func() int64 {
		once.Do(func() { close(done); peak = <-res })
		return peak
	}
	t.Cleanup(func() { stop() }) // if the test ends early
	go func() {
		var peak int64
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if r, err := rssOf(pid); err == nil {
				peak = max(peak, r)
			}
			select {
			case <-done:
				res <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return stop
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// checkNoEMFILE fails the test if node i ran out of file descriptors.
func checkNoEMFILE(t *testing.T, c *Cluster, i int) {
	t.Helper()
	if log := c.RunLog(i); strings.Contains(log, "too many open files") {
		t.Errorf("%s ran out of file descriptors:\n%s", c.Node(i).ID, grepLines(log, "too many open files", 5))
	}
}

func grepLines(s, sub string, n int) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && len(out) < n {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// restartAndCheck stops and starts every node and checks the acknowledged
// tasks again.
func restartAndCheck(t *testing.T, c *Cluster, acked []string) {
	t.Helper()
	for _, i := range c.Live() {
		if code := c.Stop(i); code != 0 {
			t.Errorf("%s exited %d", c.Node(i).ID, code)
		}
	}
	c.StartAll()
	c.WaitRoles(raceSlack(10 * time.Second))
	checkAcked(t, c, acked)
}

// ---------------------------------------------------------------------------
// Client port

// Slow bodies, silent connections and a flood past the cap: each is cut
// off in bounded time, while the node answers /healthz and SubmitTask
// within a second; nothing acknowledged is lost, and the refusals show in
// /metrics.
func TestLimitsClientPortUnderAttack(t *testing.T) {
	c := newCluster(t, 1, WithConfig(clientLimits), WithLogLevel("info"))
	c.StartAll()
	c.WaitRoles(raceSlack(10 * time.Second))
	addr := c.Node(0).ClientAddr
	p := startProber(t, c, 0, "client", addr)

	// 300 bodies trickling in, a byte every 100 ms: each is cut off
	// after read_timeout (or refused at once past the cap).
	a := slowBodies(addr, 300, 100*time.Millisecond, 20*time.Second)
	closed, promptly, last := a.report(t, testReadTimeout+3*time.Second)
	if closed != len(a.conns) || promptly != closed {
		t.Errorf("slow bodies: %d of %d closed, %d within read_timeout %v + 3s (the last after %v)",
			closed, len(a.conns), promptly, testReadTimeout, last)
	}

	// 300 silent connections: closed after read_header_timeout.
	a = silent(addr, 300, 20*time.Second)
	closed, promptly, last = a.report(t, testHeaderTimeout+3*time.Second)
	if closed != len(a.conns) || promptly != closed {
		t.Errorf("silent connections: %d of %d closed, %d within read_header_timeout %v + 3s (the last after %v)",
			closed, len(a.conns), promptly, testHeaderTimeout, last)
	}

	// A flood of 600 silent connections, ten times the cap, and slow
	// bodies at the same time.
	flood := silent(addr, 600, 20*time.Second)
	a = slowBodies(addr, 100, 100*time.Millisecond, 20*time.Second)
	closed, promptly, last = flood.report(t, testHeaderTimeout+3*time.Second)
	if closed != len(flood.conns) || promptly != closed {
		t.Errorf("flood: %d of %d closed, %d within read_header_timeout %v + 3s (the last after %v)",
			closed, len(flood.conns), promptly, testHeaderTimeout, last)
	}
	if closed, _, _ := a.report(t, testReadTimeout+3*time.Second); closed != len(a.conns) {
		t.Errorf("slow bodies during the flood: %d of %d closed", closed, len(a.conns))
	}

	// Every general connection busy with a slow body (sent one at a
	// time, so each gets in), then more: they land in the health reserve,
	// which answers them 503.
	a = slowBodiesPaced(addr, testMaxConns+20, 100*time.Millisecond, 10*time.Millisecond, 20*time.Second)
	if closed, _, _ := a.report(t, testReadTimeout+3*time.Second); closed != len(a.conns) {
		t.Errorf("slow bodies past the general connections: %d of %d closed", closed, len(a.conns))
	}

	acked := p.finish()
	refused := map[string]float64{}
	for _, reason := range []string{"cap", "read_timeout", "reserve_non_health", "write_timeout", "header_too_large", "bad_request"} {
		refused[reason] = metricSample(t, c, 0, "xce_client_conn_refused_total", "reason", reason)
	}
	evicted := metricSample(t, c, 0, "xce_client_conn_evicted_total", "kind", "unused")
	t.Logf("xce_client_conn_refused_total: %v; xce_client_conn_evicted_total{kind=\"unused\"}: %v", refused, evicted)
	if refused["read_timeout"] == 0 || refused["reserve_non_health"] == 0 {
		t.Error("refusals for read_timeout and reserve_non_health not counted")
	}
	if refused["cap"]+evicted == 0 {
		t.Error("the floods past the caps were neither refused nor made room for")
	}
	if open := metricSample(t, c, 0, "xce_client_connections", "pool", "general") + metricSample(t, c, 0, "xce_client_connections", "pool", "reserve"); open > testMaxConns+testHealthReserve {
		t.Errorf("%v client connections open after the attacks, above the caps", open)
	}
	log := c.RunLog(0)
	if !strings.Contains(log, "client port: refusing or closing a connection under its limits") {
		t.Error("the node logged no refusal")
	}
	if n := strings.Count(log, "client port:"); n > 50 {
		t.Errorf("%d log lines about the client port's refusals: the log floods", n)
	}
	checkNoEMFILE(t, c, 0)
	checkAcked(t, c, acked)
	restartAndCheck(t, c, acked)
	// The refusals' summary is logged at the latest when the node stops.
	if b, err := os.ReadFile(c.Node(0).LogPath); err != nil || !bytes.Contains(b, []byte("client port: connections refused or closed under its limits")) {
		t.Errorf("no summary of the refusals in the log (%v)", err)
	}
}

// With RLIMIT_NOFILE at 512 the node lowers the default cap (with a
// warning) and a flood of 600 connections never makes accept fail.
func TestLimitsClientPortLowFDLimit(t *testing.T) {
	c := newCluster(t, 1, WithOwnBinary(), WithLogLevel("info"), WithConfig(func(cfg *configs.Config) {
		cfg.Limits.Client.ReadHeaderTimeout = configs.Duration{Duration: time.Second}
		cfg.Limits.Client.ReadTimeout = configs.Duration{Duration: 2 * time.Second}
	}))
	// The harness starts the cluster's binary: make it a shell that
	// lowers the limit (soft and hard) and execs xce, keeping the pid.
	wrapper := filepath.Join(t.TempDir(), "xce-ulimit")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nulimit -n 512 || exit 99\nexec "+xceBin+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c.InstallBinary(wrapper)
	c.StartAll()
	c.WaitRoles(raceSlack(10 * time.Second))
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", c.Pid(0))); err == nil {
		t.Logf("%s", grepLines(string(b), "open files", 1))
	}
	log := c.RunLog(0)
	if !strings.Contains(log, "RLIMIT_NOFILE is 512: limits.client.max_connections lowered from 1024 to 248") {
		t.Errorf("no warning about the lowered cap:\n%s", grepLines(log, "RLIMIT", 5))
	}
	if g := metricSample(t, c, 0, "xce_client_connection_limit", "pool", "general"); g != 248 {
		t.Errorf("general cap in force %v, want 248 (512 - 256 kept - 8 reserve)", g)
	}

	addr := c.Node(0).ClientAddr
	p := startProber(t, c, 0, "fd", addr)
	flood := silent(addr, 600, 20*time.Second)
	a := slowBodies(addr, 300, 100*time.Millisecond, 20*time.Second)
	closed, promptly, last := flood.report(t, time.Second+3*time.Second)
	if closed != len(flood.conns) || promptly != closed {
		t.Errorf("flood: %d of %d closed, %d within 4s (the last after %v)", closed, len(flood.conns), promptly, last)
	}
	if closed, _, _ := a.report(t, 2*time.Second+3*time.Second); closed != len(a.conns) {
		t.Errorf("slow bodies: %d of %d closed", closed, len(a.conns))
	}
	acked := p.finish()
	if n := metricSample(t, c, 0, "xce_client_conn_refused_total", "reason", "cap") +
		metricSample(t, c, 0, "xce_client_conn_evicted_total", "kind", "unused"); n == 0 {
		t.Error("the flood past the cap was neither refused nor made room for")
	}
	checkNoEMFILE(t, c, 0)
	checkAcked(t, c, acked)
}

// A client port reachable beyond the machine, without TLS, is warned
// about at start; a loopback one is not.
func TestLimitsClientPortExposureWarning(t *testing.T) {
	const warning = "is reachable beyond this machine and has no TLS; anyone who reaches it can call every method"
	c := newCluster(t, 2, WithLogLevel("info"))
	spec := c.ConfigSpec(1)
	_, port, _ := net.SplitHostPort(spec.ClientAddr)
	spec.ClientAddr = "0.0.0.0:" + port
	spec.Peers[1].ClientAddr = spec.ClientAddr
	spec.Insecure = true // a port beyond loopback without TLS starts only so
	if err := os.WriteFile(c.Node(1).ConfigPath, []byte(spec.YAML()), 0o644); err != nil {
		t.Fatal(err)
	}
	c.StartAll()
	want := "client port 0.0.0.0:" + port + " " + warning
	if err := testutil.Poll(raceSlack(10*time.Second), pollEvery, func() error {
		if !strings.Contains(c.RunLog(1), want) {
			return errors.New("no warning for a client port on 0.0.0.0")
		}
		return nil
	}); err != nil {
		t.Fatalf("%v:\n%s", err, grepLines(c.RunLog(1), "client port", 5))
	}
	// Both have started serving by the time they agree on roles; the
	// warning comes right after "listening".
	c.WaitRoles(raceSlack(10 * time.Second))
	if log := c.RunLog(0); !strings.Contains(log, "listening;") || strings.Contains(log, warning) {
		t.Errorf("a warning for a loopback client port:\n%s", grepLines(log, "client port", 5))
	}
}

// ---------------------------------------------------------------------------
// Peer port

// Peer limits of the attacked node: a cap at the least three voters
// allow, and a short first-byte timeout.
const (
	testPeerMaxConns  = 16
	testPeerFirstByte = time.Second
	testPeerRead      = 2 * time.Second
)

func peerLimits(cfg *configs.Config) {
	l := &cfg.Limits.Peer
	l.MaxConnections = testPeerMaxConns
	l.FirstByteTimeout = configs.Duration{Duration: testPeerFirstByte}
	l.ReadTimeout = configs.Duration{Duration: testPeerRead}
}

// rpcAppendEntries is the first byte of an AppendEntries on raft's
// network transport.
const rpcAppendEntries = 0

// hugeClaim is an AppendEntries whose one entry declares 1 GiB of data,
// and brings a little of it.
func hugeClaim() []byte {
	var b bytes.Buffer
	b.WriteByte(rpcAppendEntries)
	b.Write([]byte{0x81, 0xa7})
	b.WriteString("Entries")
	b.Write([]byte{0x91, 0x81, 0xa4})
	b.WriteString("Data")
	b.Write([]byte{0xc6, 0x40, 0, 0, 0}) // bin32 of 1 GiB
	b.Write(make([]byte, 4096))
	return b.Bytes()
}

// bigAppend is a well-formed AppendEntries of a stale term carrying one
// 64 MiB entry.
func bigAppend(t *testing.T) []byte {
	var b bytes.Buffer
	b.WriteByte(rpcAppendEntries)
	req := raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax},
		Entries:   []*raft.Log{{Index: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{'x'}, 64<<20)}},
	}
	if err := codec.NewEncoder(&b, &codec.MsgpackHandle{}).Encode(&req); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// sendAndWatch connects to addr, writes msg (in the background, as the
// node may stop reading) and watches for the node to close the connection.
func (a *attack) sendAndWatch(t *testing.T, addr string, msg []byte, until time.Time) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a.watch(conn, until)
	a.wg.Go(func() {
		_ = conn.SetWriteDeadline(until)
		_, _ = conn.Write(msg)
	})
}

// The peer port of the follower the quorum needs takes an AppendEntries
// claiming 1 GiB, one of 64 MiB, and 300 silent connections: the cluster
// keeps serving through it, the follower's RSS stays bounded, and the
// connections are refused or cut off in bounded time.
func TestLimitsPeerPortUnderAttack(t *testing.T) {
	c := newCluster(t, 3, WithConfig(peerLimits), WithLogLevel("info"))
	c.StartAll()
	pri := c.WaitRoles(raceSlack(10 * time.Second))
	a, b := (pri+1)%3, (pri+2)%3
	// The primary's quorum is the attacked follower alone.
	if code := c.Stop(b); code != 0 {
		t.Fatalf("%s exited %d", c.Node(b).ID, code)
	}
	peer := c.Node(a).PeerAddr
	pid := c.Pid(a)
	p := startProber(t, c, a, "peer", c.Node(pri).ClientAddr, c.Node(a).ClientAddr)

	// A message is refused from its declared sizes, before it is read
	// whole: the node never holds one.
	base, err := rssOf(pid)
	if err != nil {
		t.Fatal(err)
	}
	peak := rssPeak(t, pid)
	big := newAttack("oversized AppendEntries")
	until := time.Now().Add(15 * time.Second)
	big.sendAndWatch(t, peer, hugeClaim(), until)
	big.sendAndWatch(t, peer, bigAppend(t), until)
	// Bounded by the read timeout, loosely: on a loaded machine under the
	// race detector the node takes seconds more to get to the close.
	prompt := raceSlack(testPeerRead + 3*time.Second)
	closed, promptly, last := big.report(t, prompt)
	if closed != 2 || promptly != 2 {
		t.Errorf("oversized messages: %d of 2 connections closed, %d within %v of read_timeout %v (the last after %v) (peer limits not in place?)",
			closed, promptly, prompt, testPeerRead, last.Round(time.Millisecond))
	}
	top := peak()
	t.Logf("%s RSS: %s before the oversized messages, peak %s", c.Node(a).ID, mib(base), mib(top))
	if grew := top - base; grew > 32<<20 {
		t.Errorf("%s RSS grew by %s taking a 64 MiB message, more than 32 MiB (peer limits not in place?)", c.Node(a).ID, mib(grew))
	}

	// Silent connections: past max_connections closed at once, the rest
	// after first_byte_timeout.
	if base, err = rssOf(pid); err != nil {
		t.Fatal(err)
	}
	peak = rssPeak(t, pid)
	quiet := silent(peer, 300, 15*time.Second)
	closed, promptly, last = quiet.report(t, 500*time.Millisecond)
	if open := len(quiet.conns) - promptly; open > testPeerMaxConns {
		t.Errorf("%d silent peer connections stayed open past 500ms, more than max_connections %d (peer limits not in place?)", open, testPeerMaxConns)
	}
	if closed != len(quiet.conns) || last > testPeerFirstByte+3*time.Second {
		t.Errorf("silent peer connections: %d of %d closed, the last after %v; want all within first_byte_timeout %v + 3s (peer limits not in place?)",
			closed, len(quiet.conns), last.Round(time.Millisecond), testPeerFirstByte)
	}
	top = peak()
	t.Logf("%s RSS: %s before the silent connections, peak %s", c.Node(a).ID, mib(base), mib(top))
	if grew := top - base; grew > 64<<20 {
		t.Errorf("%s RSS grew by %s holding silent connections, more than 64 MiB", c.Node(a).ID, mib(grew))
	}

	acked := p.finish()
	// Still a member that serves its role. On a loaded machine the two
	// may have swapped roles in an election (the prober's writes were
	// acknowledged throughout, which checkAcked proves); a node the
	// attacks had wedged would answer neither.
	s, err := c.Status(a)
	if err != nil || s.Role != xcev1.Role_ROLE_STANDBY && s.Role != xcev1.Role_ROLE_PRIMARY {
		t.Errorf("attacked follower after the attacks: %v %v", s, err)
	}
	c.Start(b)
	c.WaitRoles(raceSlack(10 * time.Second))
	checkAcked(t, c, acked)
}
