package localcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Process is one child process whose output goes to a log file.
type Process struct {
	proc  *os.Process
	done  chan struct{}
	code  int              // valid once done is closed; -1: killed by a signal
	state *os.ProcessState // valid once done is closed; nil if the wait failed
}

// StartProcess runs exe with args, appending its stdout and stderr to the
// file at logPath. With dieWithParent the child is SIGKILLed should this
// process die.
func StartProcess(exe, logPath string, dieWithParent bool, args ...string) (*Process, error) {
	return StartProcessEnv(exe, logPath, dieWithParent, nil, args...)
}

// StartProcessEnv is StartProcess with env (KEY=value) added to the
// environment the child inherits.
func StartProcessEnv(exe, logPath string, dieWithParent bool, env []string, args ...string) (*Process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	if dieWithParent {
		cmd.SysProcAttr = dieWithParentAttr()
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{proc: cmd.Process, done: make(chan struct{}), code: -1}
	go func() {
		_ = cmd.Wait()
		p.code, p.state = cmd.ProcessState.ExitCode(), cmd.ProcessState
		close(p.done)
	}()
	return p, nil
}

// Adopt watches the process pid, a child of this one (directly, or as a
// child subreaper's orphan).
func Adopt(pid int) (*Process, error) {
	proc, err := os.FindProcess(pid)
	if err != nil {
		return nil, err
	}
	p := &Process{proc: proc, done: make(chan struct{}), code: -1}
	go func() {
		if st, err := proc.Wait(); err == nil {
			p.code, p.state = st.ExitCode(), st
		}
		close(p.done)
	}()
	return p, nil
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.proc.Pid }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitStatus says how the process ended, with its code or the signal that
// killed it ("exit status 1", "signal: killed"); "" while it runs.
func (p *Process) ExitStatus() string {
	if !p.Exited() {
		return ""
	}
	if p.state == nil {
		return "exit status unknown"
	}
	return p.state.String()
}

// Signal sends sig; a process that has exited is not an error.
func (p *Process) Signal(sig os.Signal) error {
	if err := p.proc.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// Wait waits at most d for the exit and returns the exit code (-1: killed
// by a signal); ok is false when d passed first.
func (p *Process) Wait(d time.Duration) (code int, ok bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return p.code, true
	case <-t.C:
		return 0, false
	}
}

// Kill SIGKILLs the process and waits at most d for it to go.
func (p *Process) Kill(d time.Duration) (int, error) {
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return 0, err
	}
	code, ok := p.Wait(d)
	if !ok {
		return 0, fmt.Errorf("pid %d did not die within %v of SIGKILL", p.Pid(), d)
	}
	return code, nil
}

// StopAll sends SIGTERM to every process, then waits for each, killing one
// that takes longer than grace.
func StopAll(grace time.Duration, ps ...*Process) {
	for _, p := range ps {
		_ = p.Signal(syscall.SIGTERM)
	}
	for _, p := range ps {
		if _, ok := p.Wait(grace); !ok {
			_ = p.Signal(syscall.SIGKILL)
			<-p.done
		}
	}
}
