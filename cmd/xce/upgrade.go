package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cloudflare/tableflip"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/controller"
)

// Upgrade in place (SIGHUP, or `xce upgrade --pid-file F`). The listening
// sockets pass from this process to the new one with cloudflare/tableflip,
// so no client ever sees a refused connection. The sequence, logged step by
// step:
//
//  1. The config file is validated with this binary's rules; a bad file
//     ends the upgrade before anything changes.
//  2. A PRIMARY transfers leadership and waits (handOffWait) until another
//     node is PRIMARY, so the cluster keeps serving writes.
//  3. The new binary (the file at this process's argv[0] now) starts with
//     the inherited client and peer listeners. It answers NOT_READY from its
//     first moment and reports ready to tableflip as soon as its client port
//     serves, before it touches storage.
//  4. This process stops accepting, drains in-flight requests (bounded),
//     shuts Raft and storage down and exits 0.
//  5. The new process takes the data dir lock once this one released it
//     (waiting at most inheritedLockWait, never opening it twice), starts
//     Raft and rejoins as STANDBY.
//
// A new process that fails before step 3 ends (bad binary, bad config,
// timeout) leaves this one serving, with the error logged and written to
// the upgrade status file. Only one upgrade runs at a time: a SIGHUP during
// one is logged and ignored.
const (
	handOffWait       = 5 * time.Second
	upgradeTimeout    = 30 * time.Second
	inheritedLockWait = 30 * time.Second
)

// upgradeStatus is written next to the pid file (F.upgrade) at each step,
// for `xce upgrade` to report the outcome.
type upgradeStatus struct {
	Pid    int       `json:"pid"`
	State  string    `json:"state"` // started, failed, handed_over
	Error  string    `json:"error,omitempty"`
	NewPid int       `json:"new_pid,omitempty"`
	At     time.Time `json:"at"`
}

func statusPath(pidFile string) string { return pidFile + ".upgrade" }

// upgrader runs the sequence above for one server process.
type upgrader struct {
	upg     *tableflip.Upgrader
	cfgPath string
	pidFile string
	log     zerolog.Logger
	busy    atomic.Bool
}

func (u *upgrader) writeStatus(s upgradeStatus) {
	if u.pidFile == "" {
		return
	}
	s.Pid, s.At = os.Getpid(), time.Now()
	b, _ := json.Marshal(s)
	if err := writePrivate(statusPath(u.pidFile), append(b, '\n')); err != nil {
		u.log.Warn().Err(err).Msg("upgrade: writing the status file")
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

func (u *upgrader) fail(err error) {
	u.log.Error().Err(err).Msg("upgrade failed; this process keeps serving")
	u.writeStatus(upgradeStatus{State: "failed", Error: err.Error()})
	u.busy.Store(false)
}

// start begins an upgrade unless one runs; stop ends this process's node
// once the new process serves.
func (u *upgrader) start(node *controller.Node, stop func()) {
	if !u.busy.CompareAndSwap(false, true) {
		u.log.Warn().Msg("SIGHUP ignored: an upgrade is already in progress")
		return
	}
	go func() {
		began := time.Now()
		u.writeStatus(upgradeStatus{State: "started"})
		u.log.Info().Str("config", u.cfgPath).Msg("upgrade 1/5: validating the config file")
		if _, err := configs.Load(u.cfgPath); err != nil {
			u.fail(fmt.Errorf("config: %w", err))
			return
		}
		u.log.Info().Msg("upgrade 2/5: handing leadership on (if PRIMARY)")
		ctx, cancel := context.WithTimeout(context.Background(), handOffWait)
		err := node.HandOff(ctx)
		cancel()
		if err != nil {
			u.log.Warn().Err(err).Msg("upgrade: hand-off incomplete; going on (the cluster elects without this node)")
		}
		u.log.Info().Str("binary", os.Args[0]).Msg("upgrade 3/5: starting the new process with the inherited listeners")
		if err := u.upg.Upgrade(); err != nil {
			u.fail(fmt.Errorf("the new process did not start: %w", err))
			return
		}
		newPid := readPid(u.pidFile)
		u.log.Info().Int("new_pid", newPid).Dur("after", time.Since(began)).
			Msg("upgrade 4/5: the new process serves; draining, stopping Raft and storage, exiting")
		u.writeStatus(upgradeStatus{State: "handed_over", NewPid: newPid})
		node.Drain()
		stop()
	}()
}

// readPid returns the pid in a pid file, 0 when there is none.
func readPid(path string) int {
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

func upgradeCmd() *cobra.Command {
	var pidFile string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "upgrade --pid-file FILE",
		Short: "Upgrade a running server in place (sends SIGHUP and waits for the outcome)",
		Long: `Upgrade a running server in place: send SIGHUP to the pid in --pid-file and
wait until the new process (the binary now at the server's path) serves and the
old one has handed over, or until the upgrade fails. Exits 0 on success, 1 on
failure with the reason.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if pidFile == "" {
				return usageErr("upgrade: --pid-file is required")
			}
			return runUpgrade(cmd.OutOrStdout(), pidFile, timeout)
		},
	}
	cmd.Flags().StringVar(&pidFile, "pid-file", "", "the server's pid file (xce server --pid-file)")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "give up waiting after this long")
	return cmd
}

func readStatus(pidFile string) (upgradeStatus, bool) {
	var s upgradeStatus
	b, err := os.ReadFile(statusPath(pidFile))
	if err != nil || json.Unmarshal(b, &s) != nil {
		return s, false
	}
	return s, true
}

func runUpgrade(out interface{ Write([]byte) (int, error) }, pidFile string, timeout time.Duration) error {
	pid := readPid(pidFile)
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
		if s, ok := readStatus(pidFile); ok && s.Pid == pid && !s.At.Before(sent) {
			switch s.State {
			case "failed":
				return errors.New("upgrade failed: " + s.Error)
			case "handed_over":
				fmt.Fprintf(out, "upgraded: pid %d -> %d\n", pid, s.NewPid)
				return nil
			}
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			if np := readPid(pidFile); np != pid && np > 0 {
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
