// Package upgrade is the upgrade in place of a running server (SIGHUP, or
// `xce upgrade --pid-file F`): the listening sockets pass from the old
// process to the new one with cloudflare/tableflip, so no client ever sees
// a refused connection. docs/operations.md has the operator's procedure.
//
// The sequence, logged step by step:
//
//  1. The config file is validated with this binary's rules; a bad file
//     ends the upgrade before anything changes.
//  2. A PRIMARY transfers leadership and waits (HandOffWait) until another
//     node is PRIMARY, so the cluster keeps serving writes.
//  3. The new binary (the file at this process's argv[0] now) starts with
//     the inherited client and peer listeners. It answers NOT_READY from its
//     first moment and reports ready to tableflip as soon as its client port
//     serves, before it touches storage.
//  4. This process stops accepting, drains in-flight requests (bounded),
//     shuts Raft and storage down and exits 0.
//  5. The new process takes the data dir lock once this one released it
//     (waiting at most InheritedLockWait, never opening it twice), starts
//     Raft and rejoins as STANDBY.
//
// A new process that fails before step 3 ends (bad binary, bad config,
// timeout) leaves this one serving, with the error logged and written to
// the upgrade status file. Only one upgrade runs at a time: a SIGHUP during
// one is logged and ignored.
package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cloudflare/tableflip"
	"github.com/rs/zerolog"

	"github.com/xce/xce/configs"
)

const (
	// HandOffWait bounds step 2.
	HandOffWait = 5 * time.Second
	// Timeout bounds step 3: the new process must serve within it.
	Timeout = 30 * time.Second
	// InheritedLockWait bounds step 5.
	InheritedLockWait = 30 * time.Second
)

// Status is written next to the pid file (F.upgrade) at each step, for
// `xce upgrade` to report the outcome.
type Status struct {
	Pid    int       `json:"pid"`
	State  string    `json:"state"` // started, failed, handed_over
	Error  string    `json:"error,omitempty"`
	NewPid int       `json:"new_pid,omitempty"`
	At     time.Time `json:"at"`
}

// StatusPath is the status file of the server whose pid file is pidFile.
func StatusPath(pidFile string) string { return pidFile + ".upgrade" }

// Node is what the sequence needs of the running server.
type Node interface {
	// HandOff transfers leadership if this node is PRIMARY and waits
	// until another node is.
	HandOff(ctx context.Context) error
	// Drain stops accepting and waits (bounded) for in-flight requests.
	Drain()
}

// Options configure an Upgrader.
type Options struct {
	// ConfigPath is the server's config file, validated at step 1.
	ConfigPath string
	// PidFile, when set, names this process once it serves; the status
	// file lives next to it.
	PidFile string
	Log     zerolog.Logger
}

// Upgrader runs the sequence above for one server process.
type Upgrader struct {
	upg  *tableflip.Upgrader
	opts Options
	busy atomic.Bool
}

// New prepares the hand-over of this process's listeners. tableflip
// writes the pid file once this process serves (Ready), readable and
// writable by its owner only (a temporary file, 0600, renamed).
func New(o Options) (*Upgrader, error) {
	upg, err := tableflip.New(tableflip.Options{PIDFile: o.PidFile, UpgradeTimeout: Timeout})
	if err != nil {
		return nil, fmt.Errorf("upgrader: %w", err)
	}
	return &Upgrader{upg: upg, opts: o}, nil
}

// Close releases the upgrader and removes the pid file, unless it names a
// new process by now (after an upgrade).
func (u *Upgrader) Close() {
	if p := u.opts.PidFile; p != "" && ReadPid(p) == os.Getpid() {
		os.Remove(p)
	}
	u.upg.Stop()
}

// Listen returns the listener inherited from the old process for addr, or
// a new one.
func (u *Upgrader) Listen(network, addr string) (net.Listener, error) {
	return u.upg.Listen(network, addr)
}

// LockWait is how long this process waits for the data dir lock: the old
// process holds it until it has drained (step 5); 0 when it was not
// started by an upgrade.
func (u *Upgrader) LockWait() time.Duration {
	if u.upg.HasParent() {
		return InheritedLockWait
	}
	return 0
}

// Ready tells the old process (if any) that this one serves, and writes
// the pid file.
func (u *Upgrader) Ready() {
	if err := u.upg.Ready(); err != nil {
		u.opts.Log.Warn().Err(err).Msg("reporting ready to the upgrader")
	}
}

func (u *Upgrader) writeStatus(s Status) {
	if u.opts.PidFile == "" {
		return
	}
	s.Pid, s.At = os.Getpid(), time.Now()
	b, _ := json.Marshal(s)
	if err := writePrivate(StatusPath(u.opts.PidFile), append(b, '\n')); err != nil {
		u.opts.Log.Warn().Err(err).Msg("upgrade: writing the status file")
	}
}

// writePrivate replaces the file at path with data, readable and writable
// by this user only, through a temporary file renamed into place.
func writePrivate(path string, data []byte) error {
	tmp := path + ".tmp"
	// A temporary file left by an earlier run keeps its mode through
	// os.WriteFile: start from a new one.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

func (u *Upgrader) fail(err error) {
	u.opts.Log.Error().Err(err).Msg("upgrade failed; this process keeps serving")
	u.writeStatus(Status{State: "failed", Error: err.Error()})
	u.busy.Store(false)
}

// Start begins an upgrade unless one runs; stop ends this process's node
// once the new process serves. The sequence runs on a goroutine of its
// own that ends with the upgrade; this process exits after it succeeded.
func (u *Upgrader) Start(node Node, stop func()) {
	log := u.opts.Log
	if !u.busy.CompareAndSwap(false, true) {
		log.Warn().Msg("SIGHUP ignored: an upgrade is already in progress")
		return
	}
	go func() {
		began := time.Now()
		u.writeStatus(Status{State: "started"})
		log.Info().Str("config", u.opts.ConfigPath).Msg("upgrade 1/5: validating the config file")
		if _, err := configs.Load(u.opts.ConfigPath); err != nil {
			u.fail(fmt.Errorf("config: %w", err))
			return
		}
		log.Info().Msg("upgrade 2/5: handing leadership on (if PRIMARY)")
		ctx, cancel := context.WithTimeout(context.Background(), HandOffWait)
		err := node.HandOff(ctx)
		cancel()
		if err != nil {
			log.Warn().Err(err).Msg("upgrade: hand-off incomplete; going on (the cluster elects without this node)")
		}
		log.Info().Str("binary", os.Args[0]).Msg("upgrade 3/5: starting the new process with the inherited listeners")
		if err := u.upg.Upgrade(); err != nil {
			u.fail(fmt.Errorf("the new process did not start: %w", err))
			return
		}
		newPid := ReadPid(u.opts.PidFile)
		log.Info().Int("new_pid", newPid).Dur("after", time.Since(began)).
			Msg("upgrade 4/5: the new process serves; draining, stopping Raft and storage, exiting")
		u.writeStatus(Status{State: "handed_over", NewPid: newPid})
		node.Drain()
		stop()
	}()
}

// ReadPid returns the pid in a pid file, 0 when there is none.
func ReadPid(path string) int {
	if path == "" {
		return 0
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}

// ReadStatus reads the status file of the server whose pid file is pidFile.
func ReadStatus(pidFile string) (Status, bool) {
	var s Status
	b, err := os.ReadFile(StatusPath(pidFile))
	if err != nil || json.Unmarshal(b, &s) != nil {
		return s, false
	}
	return s, true
}

// Request is `xce upgrade`: it sends SIGHUP to the server named by pidFile
// and waits, at most timeout, for the outcome in its status file.
func Request(out io.Writer, pidFile string, timeout time.Duration) error {
	pid := ReadPid(pidFile)
	if pid <= 0 {
		return fmt.Errorf("upgrade: %s holds no pid", pidFile)
	}
	sent := time.Now()
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("upgrade: signalling pid %d: %w", pid, err)
	}
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		if s, ok := ReadStatus(pidFile); ok && s.Pid == pid && !s.At.Before(sent) {
			switch s.State {
			case "failed":
				return errors.New("upgrade failed: " + s.Error)
			case "handed_over":
				fmt.Fprintf(out, "upgraded: pid %d -> %d\n", pid, s.NewPid)
				return nil
			}
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			if np := ReadPid(pidFile); np != pid && np > 0 {
				fmt.Fprintf(out, "upgraded: pid %d -> %d\n", pid, np)
				return nil
			}
			return fmt.Errorf("upgrade: pid %d exited without handing over", pid)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("upgrade: no outcome within %v", timeout)
		}
	}
}
