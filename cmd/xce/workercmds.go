package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/xce/xce/assign"
	"github.com/xce/xce/client"
	"github.com/xce/xce/logging"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/worker"
)

// workerFlags are the flags of `xce worker`.
type workerFlags struct {
	id, controllers, clientAddr string
	pinControllers              bool
	capacity                    uint32
	labels                      []string // --label k=v, repeated
	restoreRate                 float64
	initialLag, dropLag         int64
	dropAfter, drainTimeout     time.Duration
	logLevel, logFormat         string
	creds                       credFlags
	kv                          kvWorkerFlags // --store: the Kafka-backed worker
}

// config turns the flags into a worker.Config and the simulator's config
// (usage errors for bad values).
func (f *workerFlags) config() (worker.Config, worker.SimulatorConfig, error) {
	if f.id == "" {
		return worker.Config{}, worker.SimulatorConfig{}, usageErr("worker: --id is required")
	}
	switch {
	case f.restoreRate <= 0:
		return worker.Config{}, worker.SimulatorConfig{}, usageErr("--restore-rate: %v is not positive", f.restoreRate)
	case f.initialLag < 0:
		return worker.Config{}, worker.SimulatorConfig{}, usageErr("--initial-lag: %d is negative", f.initialLag)
	case f.dropLag <= 0:
		return worker.Config{}, worker.SimulatorConfig{}, usageErr("--drop-lag: %d is not positive", f.dropLag)
	case f.dropAfter <= 0:
		return worker.Config{}, worker.SimulatorConfig{}, usageErr("--drop-after: %s is not positive", f.dropAfter)
	case f.drainTimeout < 0:
		return worker.Config{}, worker.SimulatorConfig{}, usageErr("--drain-timeout: %s is negative", f.drainTimeout)
	}
	labels, err := parseLabels(f.labels)
	if err != nil {
		return worker.Config{}, worker.SimulatorConfig{}, err
	}
	drain := f.drainTimeout
	if drain == 0 {
		drain = -1 // worker.Config: negative stops at once
	}
	initial := f.initialLag
	if initial == 0 {
		initial = -1 // worker.SimulatorConfig: negative means "caught up at once"
	}
	return worker.Config{
			ID: f.id, Controllers: strings.Split(f.controllers, ","), Capacity: f.capacity, ClientAddr: f.clientAddr,
			Labels: labels, Credentials: f.creds.credentials(), PinControllers: f.pinControllers, DrainTimeout: drain,
		}, worker.SimulatorConfig{
			RestoreRate: f.restoreRate, InitialLag: initial, DropLag: f.dropLag, DropAfter: f.dropAfter,
		}, nil
}

// parseLabels turns --label k=v values into labels, refusing a value
// without '=', a key given twice, and what assign.CheckLabels refuses, so
// that nothing is sent with a label the primary would refuse.
func parseLabels(vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(vals))
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		switch {
		case !ok:
			return nil, usageErr("--label %q: want KEY=VALUE", v)
		case !assign.ValidLabelKey(k):
			return nil, usageErr("--label %q: key %q: want 1 to %d bytes of letters, digits, '.', '-', '_', '/'", v, k, assign.MaxLabelBytes)
		case !assign.ValidLabelValue(val):
			return nil, usageErr("--label %q: value %q: want at most %d bytes of letters, digits, '.', '-', '_'", v, val, assign.MaxLabelBytes)
		}
		if _, dup := out[k]; dup {
			return nil, usageErr("--label %q: key %q is given twice", v, k)
		}
		out[k] = val
	}
	if err := assign.CheckLabels(out); err != nil {
		return nil, usageErr("--label: %v", err)
	}
	return out, nil
}

// runWorker runs a reference worker until ctx ends: the worker library
// with the simulator as its handler.
func runWorker(ctx context.Context, f *workerFlags, stderr io.Writer) error {
	cfg, simCfg, err := f.config()
	if err != nil {
		return err
	}
	log, err := logging.New(stderr, f.logLevel, f.logFormat, "")
	if err != nil {
		return usageErr("%v", err)
	}
	cfg.Logger = logging.NewSlog(log)
	simCfg.Logger = cfg.Logger.With("worker_id", cfg.ID)
	sim, err := worker.NewSimulator(simCfg)
	if err != nil {
		return usageErr("%v", err)
	}
	log.Info().Str("worker_id", cfg.ID).Float64("restore_rate", sim.Config().RestoreRate).
		Int64("initial_lag", sim.Config().InitialLag).Msg("simulating state")
	w, err := worker.New(cfg, sim)
	if err != nil {
		if errors.Is(err, worker.ErrConfig) || errors.Is(err, client.ErrInvalid) {
			return usageErr("%v", err)
		}
		return err
	}
	return w.Run(ctx)
}

func workerCmd() *cobra.Command {
	var f workerFlags
	cmd := &cobra.Command{
		Use:   "worker --id W",
		Short: "Run a reference worker that simulates the state of the tasks it is given",
		Long: `Run a reference worker until SIGTERM or SIGINT (exit 0). It registers with the
primary, heartbeats at the interval the controller gives, registers again after
a controller failover, and simulates state: every copy it holds (active,
standby, warm-up) catches up at --restore-rate records/s from --initial-lag
(a task it has no state for) down to 0; a copy it no longer holds falls behind
at the same rate and is dropped past --drop-lag or after --drop-after. It
reports its lags, a notice when its actives change, and "running" or
"restoring" for each active task. It runs an active only while the primary
grants it and its lease holds (a heartbeat acknowledged within the lease the
primary gives), and lists the actives it runs in every heartbeat.

On SIGTERM or SIGINT it hands its actives over before it exits (0): it tells
the primary it is leaving, keeps each active running until the primary has a
caught-up copy elsewhere, stops it when told and says so at once, so that the
new worker runs it within a round trip; past --drain-timeout it stops the rest
and exits. A second signal does not hurry it: --drain-timeout bounds it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if f.kv.store != "" {
				return runKVWorker(ctx, &f, cmd.ErrOrStderr())
			}
			return runWorker(ctx, &f, cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.id, "id", "", "worker id (1-128 characters of [A-Za-z0-9._-]); required")
	fl.StringVar(&f.controllers, "controllers", "127.0.0.1:7101", "comma-separated HOST:PORT list of controller client addresses")
	fl.BoolVar(&f.pinControllers, "pin-controllers", false, "call only the --controllers addresses (proxies or port-forwards), never the client addresses the members advertise")
	fl.Uint32Var(&f.capacity, "capacity", 1, "relative weight (processing threads); 0 drains the worker")
	fl.StringVar(&f.clientAddr, "client-addr", "", "where this worker serves its clients (informational)")
	fl.StringArrayVar(&f.labels, "label", nil, "KEY=VALUE saying where the worker runs (zone, rack, host, ...), repeatable; the assignor spreads a task's copies over the values of assignor.spread_by's keys")
	fl.Float64Var(&f.restoreRate, "restore-rate", worker.DefaultRestoreRate, "records/s a held copy catches up (and an unheld one falls behind)")
	fl.Int64Var(&f.initialLag, "initial-lag", worker.DefaultInitialLag, "lag of a copy assigned without state (0: caught up at once)")
	fl.Int64Var(&f.dropLag, "drop-lag", worker.DefaultDropLag, "drop the state of a task no longer held once its lag passes this")
	fl.DurationVar(&f.dropAfter, "drop-after", worker.DefaultDropAfter, "drop the state of a task no longer held after this long")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", worker.DefaultDrainTimeout, "on SIGTERM, how long to keep the actives running while the primary hands them to other workers (0: stop at once)")
	fl.StringVar(&f.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "auto", "json, console or auto (console on a terminal)")
	f.creds.register(fl)
	f.kv.register(cmd)
	return cmd
}

// workerJSON is a worker as `xce workers --json` prints it.
type workerJSON struct {
	WorkerID           string           `json:"worker_id"`
	Capacity           uint32           `json:"capacity"`
	ClientAddr         string           `json:"client_addr"`
	LastHeartbeatAgeMs int64            `json:"last_heartbeat_age_ms"`
	Actives            []string         `json:"actives"`
	Standbys           []string         `json:"standbys"`
	Warmups            []string         `json:"warmups"`
	Lags               map[string]int64 `json:"lags"`
	Notice             string           `json:"notice"`
	// Labels are the labels the worker registered with ({} for none).
	Labels map[string]string `json:"labels"`
	// DrainState: "" (runs what it is given), "draining", "drained" or
	// "leaving".
	DrainState string `json:"drain_state"`
}

type workersJSON struct {
	Workers    []workerJSON `json:"workers"`
	Generation uint64       `json:"generation"`
	Settling   bool         `json:"settling"`
	// Drained lists every drained worker, with a session or not.
	Drained []string `json:"drained"`
	// Away lists the workers whose session ended within
	// assignor.replace_delay: their standbys are kept for them.
	Away []awayJSON `json:"away"`
}

type awayJSON struct {
	WorkerID     string            `json:"worker_id"`
	ReplacedInMs int64             `json:"replaced_in_ms"`
	Labels       map[string]string `json:"labels"`
	Standbys     []string          `json:"standbys"`
}

func workersOut(r *xcev1.ListWorkersResponse) workersJSON {
	out := workersJSON{Workers: make([]workerJSON, len(r.Workers)), Generation: r.Generation, Settling: r.Settling,
		Drained: nonNil(r.Drained)}
	for i, w := range r.Workers {
		out.Workers[i] = workerJSON{
			WorkerID: w.WorkerId, Capacity: w.Capacity, ClientAddr: w.ClientAddr, LastHeartbeatAgeMs: w.LastHeartbeatAgeMs,
			Actives: nonNil(w.Actives), Standbys: nonNil(w.Standbys), Warmups: nonNil(w.Warmups),
			Lags: nonNilLags(w.Lags), Notice: w.Notice, DrainState: w.DrainState, Labels: nonNilLabels(w.Labels),
		}
	}
	out.Away = make([]awayJSON, len(r.Away))
	for i, a := range r.Away {
		out.Away[i] = awayJSON{WorkerID: a.WorkerId, ReplacedInMs: a.ReplacedInMs, Labels: nonNilLabels(a.Labels), Standbys: nonNil(a.Standbys)}
	}
	return out
}

func nonNilLabels(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// labelsCell prints labels as "k=v,k=v", sorted by key ("-" for none).
func labelsCell(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	return assign.FormatLabels(m)
}

func nonNilLags(m map[string]int64) map[string]int64 {
	if m == nil {
		return map[string]int64{}
	}
	return m
}

// listCell prints a list of task or worker ids, at most n of them.
func listCell(s []string, n int) string {
	switch {
	case len(s) == 0:
		return "-"
	case len(s) <= n:
		return strings.Join(s, ",")
	}
	return fmt.Sprintf("%s,… (%d)", strings.Join(s[:n], ","), len(s))
}

// lagsCell prints lags as "k=v" pairs, sorted by key.
func lagsCell(m map[string]int64) string {
	if len(m) == 0 {
		return "-"
	}
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}

func printWorkers(w io.Writer, r *xcev1.ListWorkersResponse) error {
	fmt.Fprintf(w, "generation %d, %d workers", r.Generation, len(r.Workers))
	if r.Settling {
		fmt.Fprint(w, " (settling: the primary waits for workers to report before it places anything)")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tCAPACITY\tSTATE\tLABELS\tLAST SEEN\tACTIVES\tSTANDBYS\tWARMUPS\tNOTICE")
	connected := map[string]bool{}
	for _, x := range r.Workers {
		connected[x.WorkerId] = true
		notice, st := x.Notice, x.DrainState
		if notice == "" {
			notice = "-"
		}
		if st == "" {
			st = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.WorkerId, x.Capacity, st, labelsCell(x.Labels),
			(time.Duration(x.LastHeartbeatAgeMs) * time.Millisecond).String(),
			listCell(x.Actives, 4), listCell(x.Standbys, 4), listCell(x.Warmups, 4), notice)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var absent []string
	for _, id := range r.Drained {
		if !connected[id] {
			absent = append(absent, id)
		}
	}
	if len(absent) > 0 {
		fmt.Fprintf(w, "drained, with no session: %s\n", strings.Join(absent, ", "))
	}
	for _, a := range r.Away {
		fmt.Fprintf(w, "away: %s (%s), its %d standbys kept for it; replaced in %v unless it reports again\n", a.WorkerId,
			labelsCell(a.Labels), len(a.Standbys), (time.Duration(a.ReplacedInMs) * time.Millisecond).Round(time.Second))
	}
	return nil
}

func workersCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List the workers the primary has sessions with, and their copies; drain and undrain one",
		Long: `List the workers the primary has sessions with: capacity, drain state, last
heartbeat, labels (k=v,k=v, by key), copies and notice. STATE is "-" (the worker runs what it is given),
"draining" (drained, its actives still moving away), "drained" (no active left;
it keeps its standbys) or "leaving" (the worker is stopping and hands its actives
over). Drained workers with no session are listed after the table.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(func(ctx context.Context, c *client.Client) error {
				r, err := c.ListWorkers(ctx)
				if err != nil {
					return err
				}
				if f.json {
					return printJSON(cmd.OutOrStdout(), workersOut(r))
				}
				return printWorkers(cmd.OutOrStdout(), r)
			})
		},
	}
	f.register(cmd)
	cmd.AddCommand(drainCmd(true), drainCmd(false))
	return cmd
}

// drainJSON is what `xce workers drain|undrain --json` prints.
type drainJSON struct {
	WorkerID string `json:"worker_id"`
	Drained  bool   `json:"drained"`
	Index    uint64 `json:"index"`
	// OnlyCopy (drain): tasks of which the worker holds the only copy.
	OnlyCopy []string `json:"only_copy,omitempty"`
	// Connected (drain): the worker has a session with the primary.
	Connected *bool `json:"connected,omitempty"`
}

// drainCmd is `xce workers drain W` (drain) or `xce workers undrain W`.
func drainCmd(drain bool) *cobra.Command {
	var f clientFlags
	use, short, long := "undrain WORKER", "End a worker's drain: the assignor may give it actives again",
		`End a worker's drain: the assignor may give it actives and new copies again,
and moves actives back to it as balance asks (once it has caught up on them).`
	if drain {
		use, short, long = "drain WORKER", "Move a worker's actives to other workers without stopping it",
			`Drain a worker: the primary moves each of its actives to another worker once a
copy there has caught up (a warm-up restores one first where there is none),
hands each over as a planned move (the worker stops it and says so, and the new
worker is granted it at once), and gives the worker no new copy. The worker
keeps running its standbys. The drain is kept in the cluster's log: it lasts
across failovers and the worker's restarts until "xce workers undrain". A
worker that holds the only copy of a task is named: those tasks move only once
a warm-up elsewhere has caught up.`
	}
	cmd := &cobra.Command{
		Use: use, Short: short, Long: long,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			return f.call(func(ctx context.Context, c *client.Client) error {
				out := drainJSON{WorkerID: id, Drained: drain}
				if drain {
					r, err := c.DrainWorker(ctx, id)
					if err != nil {
						return err
					}
					out.Index, out.OnlyCopy, out.Connected = r.Index, r.OnlyCopy, &r.Connected
				} else if err := c.UndrainWorker(ctx, id); err != nil {
					return err
				}
				if f.json {
					return printJSON(cmd.OutOrStdout(), out)
				}
				printDrain(cmd.OutOrStdout(), out)
				return nil
			})
		},
	}
	f.register(cmd)
	return cmd
}

func printDrain(w io.Writer, d drainJSON) {
	if !d.Drained {
		fmt.Fprintf(w, "%s undrained: the assignor may give it actives again\n", d.WorkerID)
		return
	}
	fmt.Fprintf(w, "%s drained: its actives move to other workers as copies there catch up; it keeps its standbys\n", d.WorkerID)
	if d.Connected != nil && !*d.Connected {
		fmt.Fprintf(w, "%s has no session with the primary: the drain applies when it registers\n", d.WorkerID)
	}
	if len(d.OnlyCopy) > 0 {
		fmt.Fprintf(w, "%s holds the only copy of %s: each moves once a warm-up elsewhere has caught up\n",
			d.WorkerID, listCell(d.OnlyCopy, 10))
	}
}

// taskAssignmentJSON is one task as `xce assignment --json` prints it.
type taskAssignmentJSON struct {
	TaskID        string           `json:"task_id"`
	Stateful      bool             `json:"stateful"`
	Active        string           `json:"active"`
	Epoch         uint64           `json:"epoch"`
	Standbys      []string         `json:"standbys"`
	Warmups       []string         `json:"warmups"`
	Lags          map[string]int64 `json:"lags"`
	PendingReason string           `json:"pending_reason,omitempty"`
	Update        string           `json:"update,omitempty"`
}

type assignmentJSON struct {
	Generation   uint64 `json:"generation"`
	AppliedIndex uint64 `json:"applied_index"`
	Settling     bool   `json:"settling"`
	Followup     bool   `json:"followup"`
	// Frozen: an operator froze the placement (xce placement freeze).
	Frozen bool                 `json:"frozen"`
	Tasks  []taskAssignmentJSON `json:"tasks"`
}

func assignmentOut(r *xcev1.GetAssignmentResponse) assignmentJSON {
	out := assignmentJSON{Generation: r.Generation, AppliedIndex: r.AppliedIndex, Settling: r.Settling, Followup: r.Followup,
		Frozen: r.Frozen, Tasks: make([]taskAssignmentJSON, len(r.Tasks))}
	for i, t := range r.Tasks {
		p := t.GetPlacement()
		out.Tasks[i] = taskAssignmentJSON{
			TaskID: p.GetTaskId(), Stateful: t.Stateful, Active: p.GetActive(), Epoch: p.GetEpoch(),
			Standbys: nonNil(p.GetStandbys()), Warmups: nonNil(p.GetWarmups()),
			Lags: nonNilLags(t.Lags), PendingReason: t.PendingReason, Update: t.Update,
		}
	}
	return out
}

func printAssignment(w io.Writer, r *xcev1.GetAssignmentResponse) error {
	fmt.Fprintf(w, "generation %d (applied index %d), %d tasks", r.Generation, r.AppliedIndex, len(r.Tasks))
	if r.Settling {
		fmt.Fprint(w, "; settling: the primary waits for workers to report and moves nothing until then")
	}
	if r.Followup {
		fmt.Fprint(w, "; moves wait for warm-ups")
	}
	fmt.Fprintln(w)
	if r.Frozen {
		fmt.Fprintln(w, "the placement is frozen (xce placement unfreeze ends it): the assignor handles failures only and moves nothing for balance")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATEFUL\tACTIVE\tEPOCH\tSTANDBYS\tWARMUPS\tLAGS\tSTATUS")
	for _, t := range r.Tasks {
		p := t.GetPlacement()
		active := p.GetActive()
		if active == "" {
			active = "-"
		}
		status := t.Update
		if t.PendingReason != "" {
			status = strings.TrimSpace(status + " (pending: " + t.PendingReason + ")")
		}
		if status == "" {
			status = "-"
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%d\t%s\t%s\t%s\t%s\n", p.GetTaskId(), t.Stateful, active, p.GetEpoch(),
			listCell(p.GetStandbys(), 4), listCell(p.GetWarmups(), 4), lagsCell(t.Lags), status)
	}
	return tw.Flush()
}

func assignmentCmd() *cobra.Command {
	var f clientFlags
	var stale, watch bool
	cmd := &cobra.Command{
		Use:   "assignment",
		Short: "Print the committed assignment: each task's active, epoch, standbys and warm-ups",
		Long: `Print the committed assignment: each task's active worker, epoch, standbys
and warm-ups. A task's epoch grows by one each time the assignment gives it
a new active worker (0: it never had one). The primary adds the lags its
workers report and each active's status; a --stale read may be served by a
STANDBY, without them.

With --watch it prints the assignment, then each new generation as it is
committed (tasks whose placement changed, and those removed), until
interrupted; across failovers it resumes where it was, missing no
generation and printing none twice. With --json, one object per line per
generation, the first the whole assignment ("full": true).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if watch {
				return watchAssignment(cmd, &f, stale)
			}
			return f.call(func(ctx context.Context, c *client.Client) error {
				r, err := c.GetAssignment(ctx, stale)
				if err != nil {
					return err
				}
				if f.json {
					return printJSON(cmd.OutOrStdout(), assignmentOut(r))
				}
				return printAssignment(cmd.OutOrStdout(), r)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&stale, "stale", false, "accept a stale read from a STANDBY")
	cmd.Flags().BoolVar(&watch, "watch", false, "print each new generation as it is committed, until interrupted")
	return cmd
}

// watchJSON is one line of `xce assignment --watch --json`: a generation.
type watchJSON struct {
	Generation   uint64               `json:"generation"`
	Full         bool                 `json:"full"`
	Tasks        []watchPlacementJSON `json:"tasks"`
	Removed      []string             `json:"removed"`
	Role         string               `json:"role"`
	AppliedIndex uint64               `json:"applied_index"`
}

type watchPlacementJSON struct {
	TaskID   string   `json:"task_id"`
	Active   string   `json:"active"`
	Epoch    uint64   `json:"epoch"`
	Standbys []string `json:"standbys"`
	Warmups  []string `json:"warmups"`
}

// watchAssignment is `xce assignment --watch`: it runs until interrupted
// (SIGINT or SIGTERM), not bounded by --timeout.
func watchAssignment(cmd *cobra.Command, f *clientFlags, stale bool) error {
	c, err := f.client()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w := cmd.OutOrStdout()
	enc := json.NewEncoder(w)
	return c.WatchAssignment(ctx, 0, stale, func(u client.AssignmentUpdate) error {
		if f.json {
			out := watchJSON{Generation: u.Generation, Full: u.Full, Tasks: make([]watchPlacementJSON, len(u.Tasks)),
				Removed: nonNil(u.Removed), Role: roleString(u.Role), AppliedIndex: u.AppliedIndex}
			for i, p := range u.Tasks {
				out.Tasks[i] = watchPlacementJSON{TaskID: p.TaskId, Active: p.Active, Epoch: p.Epoch,
					Standbys: nonNil(p.Standbys), Warmups: nonNil(p.Warmups)}
			}
			return enc.Encode(out)
		}
		kind := "changes"
		if u.Full {
			kind = "whole assignment"
		}
		fmt.Fprintf(w, "generation %d (%s, from %s, %s, applied index %d)\n", u.Generation, kind, u.Endpoint, roleString(u.Role), u.AppliedIndex)
		for _, p := range u.Tasks {
			fmt.Fprintf(w, "  %s  active %s  epoch %d  standbys %s  warmups %s\n", p.TaskId, orNone(p.Active), p.Epoch,
				listCell(p.Standbys, 8), listCell(p.Warmups, 8))
		}
		for _, id := range u.Removed {
			fmt.Fprintf(w, "  %s  removed\n", id)
		}
		return nil
	})
}
