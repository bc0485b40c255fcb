package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/xce/xce/internal/backoff"
	"github.com/xce/xce/internal/localcluster"
)

// devStage orders the stop of the dev cluster's children: the workers
// first (they would only complain about the servers going), then the input
// generator, the servers, and the broker last, so that the primary's
// publisher does not lose its broker mid-stop.
type devStage int

const (
	stageWorkers devStage = iota
	stageInput
	stageServers
	stageBroker
	devStages
)

// devChild is one part of the dev cluster that the supervisor keeps
// running: a child process, or the in-process input generator.
type devChild interface {
	// start begins a run: at setup, and again for each restart. ctx ends
	// when the supervisor stops; a child process outlives it, to be
	// stopped in its stage.
	start(ctx context.Context) error
	// ended is closed once the current run has ended; status then says
	// how ("exited (signal: killed)").
	ended() <-chan struct{}
	status() string
	// pid is the current run's process; 0 for the generator.
	pid() int
	// stop ends the current run and waits until it has: SIGTERM, then
	// SIGKILL past grace.
	stop(grace time.Duration)
}

// procChild is a child process; run starts it, the same way each time
// (arguments, log file appended, data dir or store).
type procChild struct {
	run func() (*localcluster.Process, error)

	mu   sync.Mutex
	proc *localcluster.Process // the current (or last) run
}

func (c *procChild) start(context.Context) error {
	p, err := c.run()
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.proc = p
	c.mu.Unlock()
	return nil
}

func (c *procChild) current() *localcluster.Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc
}

func (c *procChild) ended() <-chan struct{}   { return c.current().Done() }
func (c *procChild) status() string           { return "exited (" + c.current().ExitStatus() + ")" }
func (c *procChild) pid() int                 { return c.current().Pid() }
func (c *procChild) stop(grace time.Duration) { localcluster.StopAll(grace, c.current()) }

// goChild runs a function in this process, on a goroutine it owns and
// waits for in stop. A run ends with its context, or by itself with an
// error.
type goChild struct {
	run func(ctx context.Context) error

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	err    error // the last run's, once done is closed
}

func (c *goChild) start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	c.mu.Lock()
	c.cancel, c.done = cancel, done
	c.mu.Unlock()
	go func() {
		defer close(done)
		defer cancel()
		err := c.run(ctx)
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
	}()
	return nil
}

func (c *goChild) ended() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

func (c *goChild) status() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return "stopped"
	}
	return "failed: " + c.err.Error()
}

func (c *goChild) pid() int { return 0 }

func (c *goChild) stop(time.Duration) {
	c.mu.Lock()
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	cancel()
	<-done
}

// restartPolicy decides whether and when a child whose run ended starts
// again (--restart-after).
type restartPolicy struct {
	after time.Duration // 0: never
}

// next is when a run that ended at ended starts again; again is false
// when it does not. A child that keeps ending starts at most once per
// after: never a busy loop.
func (p restartPolicy) next(ended time.Time) (at time.Time, again bool) {
	if p.after <= 0 {
		return time.Time{}, false
	}
	return ended.Add(p.after), true
}

// devSignalSettle is how long the supervisor waits, once a child has
// ended, for its own stop: Ctrl-C in a terminal signals the children too,
// and one may end before this process has seen its signal.
const devSignalSettle = 200 * time.Millisecond

// devTailLines is how many of a log's last lines a report shows.
const devTailLines = 10

// supervisor owns the dev cluster's children and a watch goroutine for
// each: a child whose run ends is reported (how, and its log's last
// lines) and started again as the policy says, while the others keep
// running. Stop ends the watches, and with them any pending restart, then
// stops the children stage by stage.
type supervisor struct {
	ctx    context.Context // ends with Stop, or with the parent's (Ctrl-C)
	cancel context.CancelFunc
	policy restartPolicy
	out    io.Writer // each report is one Write, whole (os.File serializes them)

	watches sync.WaitGroup

	mu       sync.Mutex
	children [devStages][]*supervised
}

// supervised is a child with what its reports name.
type supervised struct {
	devChild
	name, logPath string
}

func newSupervisor(ctx context.Context, out io.Writer, policy restartPolicy) *supervisor {
	ctx, cancel := context.WithCancel(ctx)
	return &supervisor{ctx: ctx, cancel: cancel, policy: policy, out: out}
}

// add starts c and keeps it running until Stop, which stops it in stage.
// A failed first start is returned (and c not kept).
func (s *supervisor) add(stage devStage, name, logPath string, c devChild) error {
	if err := c.start(s.ctx); err != nil {
		return err
	}
	sc := &supervised{devChild: c, name: name, logPath: logPath}
	s.mu.Lock()
	s.children[stage] = append(s.children[stage], sc)
	s.mu.Unlock()
	s.watches.Go(func() { s.keep(sc) })
	return nil
}

// keep watches c until Stop: it reports each end of a run and starts c
// again when the policy says.
func (s *supervisor) keep(c *supervised) {
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-c.ended():
		}
		ended := time.Now()
		if !backoff.Sleep(s.ctx, devSignalSettle) {
			return
		}
		at, again := s.policy.next(ended)
		fmt.Fprint(s.out, exitReport(c.name, c.status(), c.logPath, lastLines(c.logPath, devTailLines), s.policy.after))
		if !again || !s.restart(c, at) {
			return
		}
	}
}

// restart starts c again at at, and after a failed start once more a
// policy's delay later; false when Stop came first.
func (s *supervisor) restart(c *supervised, at time.Time) bool {
	for {
		if !backoff.Sleep(s.ctx, time.Until(at)) {
			return false
		}
		err := c.start(s.ctx)
		if err == nil {
			fmt.Fprint(s.out, restartLine(c.name, c.pid()))
			return true
		}
		at, _ = s.policy.next(time.Now())
		fmt.Fprintf(s.out, "%v; trying again in %v\n", err, s.policy.after)
	}
}

// Stop ends the watches (a pending restart is cancelled), then stops the
// children stage by stage, those of a stage together. Nothing it started
// runs once it returns.
func (s *supervisor) Stop(grace time.Duration) {
	s.cancel()
	s.watches.Wait()
	s.mu.Lock()
	children := s.children
	s.mu.Unlock()
	for _, stage := range children {
		var wg sync.WaitGroup
		for _, c := range stage {
			wg.Go(func() { c.stop(grace) })
		}
		wg.Wait()
	}
}

// exitReport tells that the child name's run ended (status), with the last
// lines of its log, and whether it starts again (after, 0: never).
func exitReport(name, status, logPath string, tail []string, after time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", name, status)
	if len(tail) == 0 {
		fmt.Fprintf(&b, "; its log %s is empty\n", logPath)
	} else {
		fmt.Fprintf(&b, "; the last lines of %s:\n", logPath)
		for _, l := range tail {
			fmt.Fprintf(&b, "    | %s\n", l)
		}
	}
	if after > 0 {
		fmt.Fprintf(&b, "  %s starts again in %v\n", name, after)
	} else {
		fmt.Fprintf(&b, "  %s is not started again (--restart-after 0)\n", name)
	}
	return b.String()
}

// restartLine tells that the child name runs again, as pid (0: in
// process).
func restartLine(name string, pid int) string {
	if pid == 0 {
		return name + " started again\n"
	}
	return fmt.Sprintf("%s started again, pid %d\n", name, pid)
}

// devTailBytes bounds how much of a log's end lastLines reads.
const devTailBytes = 64 << 10

// devTailWidth bounds a line of a report's log tail.
const devTailWidth = 300

// lastLines returns the last n lines of the file at path, each cut at
// devTailWidth bytes; none when it cannot be read.
func lastLines(path string, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil
	}
	off := max(st.Size()-devTailBytes, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
		return nil
	}
	if off > 0 {
		// The first line read is likely cut: start after it.
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	lines = lines[max(len(lines)-n, 0):]
	for i, l := range lines {
		if len(l) > devTailWidth {
			lines[i] = strings.ToValidUTF8(l[:devTailWidth], "") + "…"
		}
	}
	return lines
}
