package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/xce/xce/assign"
)

// planInput is `xce assign plan`'s input file.
type planInput struct {
	Config struct {
		AcceptableRecoveryLag    *int64  `json:"acceptable_recovery_lag"`
		MaxWarmupReplicas        *int    `json:"max_warmup_replicas"`
		NumStandbyReplicas       *int    `json:"num_standby_replicas"`
		ProbingRebalanceInterval *string `json:"probing_rebalance_interval"`
	} `json:"config"`
	Tasks []struct {
		ID       string `json:"id"`
		Stateful bool   `json:"stateful"`
		// StandbyReplicas is the task's own standby count, as `xce submit
		// --standbys` records it: 0 means num_standby_replicas.
		StandbyReplicas int `json:"standby_replicas"`
	} `json:"tasks"`
	Workers []struct {
		ID       string           `json:"id"`
		Capacity int              `json:"capacity"`
		Lags     map[string]int64 `json:"lags"`
		// Drained: drained by an operator, or leaving (assign.Worker).
		Drained bool `json:"drained"`
	} `json:"workers"`
	Previous map[string]placementJSON `json:"previous"`
}

type placementJSON struct {
	Active   string   `json:"active"`
	Standbys []string `json:"standbys"`
	Warmups  []string `json:"warmups"`
}

type moveJSON struct {
	Task string `json:"task"`
	Kind string `json:"kind"`
	From string `json:"from"`
	To   string `json:"to"`
}

type planOutput struct {
	Assignment map[string]placementJSON `json:"assignment"`
	Followup   bool                     `json:"followup"`
	Moves      []moveJSON               `json:"moves"`
	// Departed lists the workers previous names that are gone; moves are
	// relative to previous without them, so a lost active moves from "".
	Departed []string `json:"departed"`
}

// parsePlanInput decodes and checks the what-if input: unknown keys, ids
// that name no task or worker, duplicates and negative numbers are errors
// that say where.
func parsePlanInput(r io.Reader) (assign.Input, error) {
	var in planInput
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return assign.Input{}, fmt.Errorf("input: %w", err)
	}
	cfg := assign.DefaultConfig()
	c := in.Config
	if c.AcceptableRecoveryLag != nil {
		cfg.AcceptableRecoveryLag = *c.AcceptableRecoveryLag
	}
	if c.MaxWarmupReplicas != nil {
		cfg.MaxWarmupReplicas = *c.MaxWarmupReplicas
	}
	if c.NumStandbyReplicas != nil {
		cfg.NumStandbyReplicas = *c.NumStandbyReplicas
	}
	if c.ProbingRebalanceInterval != nil {
		d, err := time.ParseDuration(*c.ProbingRebalanceInterval)
		if err != nil {
			return assign.Input{}, fmt.Errorf("config.probing_rebalance_interval: %v", err)
		}
		cfg.ProbingRebalanceInterval = d
	}
	if err := cfg.Validate(); err != nil {
		return assign.Input{}, fmt.Errorf("config: %w", err)
	}
	out := assign.Input{Config: cfg, Previous: assign.Assignment{}}
	tasks := map[string]bool{}
	for i, t := range in.Tasks {
		if t.ID == "" {
			return out, fmt.Errorf("tasks[%d].id: empty", i)
		}
		if tasks[t.ID] {
			return out, fmt.Errorf("tasks[%d].id: duplicate %q", i, t.ID)
		}
		switch {
		case t.StandbyReplicas < 0:
			return out, fmt.Errorf("tasks[%d].standby_replicas: %d is negative", i, t.StandbyReplicas)
		case t.StandbyReplicas > assign.MaxStandbyReplicas:
			return out, fmt.Errorf("tasks[%d].standby_replicas: %d is more than %d", i, t.StandbyReplicas, assign.MaxStandbyReplicas)
		}
		tasks[t.ID] = true
		out.Tasks = append(out.Tasks, assign.Task{ID: t.ID, Stateful: t.Stateful, StandbyReplicas: t.StandbyReplicas})
	}
	workers := map[string]bool{}
	for i, w := range in.Workers {
		switch {
		case w.ID == "":
			return out, fmt.Errorf("workers[%d].id: empty", i)
		case workers[w.ID]:
			return out, fmt.Errorf("workers[%d].id: duplicate %q", i, w.ID)
		case w.Capacity < 0:
			return out, fmt.Errorf("workers[%d].capacity: %d is negative", i, w.Capacity)
		}
		workers[w.ID] = true
		for task, lag := range w.Lags {
			if !tasks[task] {
				return out, fmt.Errorf("workers[%d].lags: unknown task %q", i, task)
			}
			if lag < 0 {
				return out, fmt.Errorf("workers[%d].lags[%q]: %d is negative", i, task, lag)
			}
		}
		out.Workers = append(out.Workers, assign.Worker{ID: w.ID, Capacity: w.Capacity, Lags: w.Lags, Drained: w.Drained})
	}
	// A worker named in previous but missing from workers has gone: its
	// copies are lost, which is the what-if an operator asks about when a
	// worker dies, so it is an input like any other (the assignor drops it).
	for task, p := range in.Previous {
		if !tasks[task] {
			return out, fmt.Errorf("previous: unknown task %q", task)
		}
		out.Previous[task] = assign.Placement{Active: p.Active, Standbys: p.Standbys, Warmups: p.Warmups}
	}
	return out, nil
}

// departedWorkers lists, sorted, the workers the previous assignment names
// that are not in the input's workers: their copies are lost.
func departedWorkers(in assign.Input) []string {
	live := make(map[string]bool, len(in.Workers))
	for _, w := range in.Workers {
		live[w.ID] = true
	}
	var gone []string
	for _, p := range in.Previous {
		for _, w := range append(append([]string{p.Active}, p.Standbys...), p.Warmups...) {
			if w != "" && !live[w] && !slices.Contains(gone, w) {
				gone = append(gone, w)
			}
		}
	}
	slices.Sort(gone)
	return gone
}

func assignCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "assign", Short: "The stateful task assignor"}
	var input string
	var asJSON bool
	plan := &cobra.Command{
		Use:   "plan --input FILE",
		Short: "What-if: the assignment the controller would compute for an input",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if input == "" {
				return usageErr("assign plan: --input is required (- for standard input)")
			}
			var b []byte
			var err error
			if input == "-" {
				b, err = io.ReadAll(cmd.InOrStdin())
			} else {
				b, err = os.ReadFile(input)
			}
			if err != nil {
				return err
			}
			in, err := parsePlanInput(bytes.NewReader(b))
			if err != nil {
				return err
			}
			res, err := assign.Plan(in)
			if err != nil {
				return err
			}
			out := planOutput{Assignment: map[string]placementJSON{}, Followup: res.Followup, Moves: []moveJSON{},
				Departed: nonNil(departedWorkers(in))}
			for task, p := range res.Assignment {
				out.Assignment[task] = placementJSON{Active: p.Active, Standbys: nonNil(p.Standbys), Warmups: nonNil(p.Warmups)}
			}
			for _, m := range res.Moves {
				out.Moves = append(out.Moves, moveJSON{Task: m.Task, Kind: m.Kind, From: m.From, To: m.To})
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return printJSON(w, out)
			}
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "TASK\tACTIVE\tSTANDBYS\tWARMUPS")
			ids := make([]string, 0, len(out.Assignment))
			for id := range out.Assignment {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			for _, id := range ids {
				p := out.Assignment[id]
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", id, p.Active, strings.Join(p.Standbys, ","), strings.Join(p.Warmups, ","))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(out.Departed) > 0 {
				fmt.Fprintf(w, "\ndeparted workers (their copies are lost): %s\n", strings.Join(out.Departed, ","))
			}
			fmt.Fprintf(w, "\n%d moves; follow-up rebalance needed: %v\n", len(out.Moves), out.Followup)
			for _, m := range out.Moves {
				fmt.Fprintf(w, "  %s %s: %s -> %s\n", m.Task, m.Kind, orNone(m.From), orNone(m.To))
			}
			return nil
		},
	}
	plan.Flags().StringVar(&input, "input", "", "input JSON file (- for standard input)")
	plan.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(plan)
	return cmd
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
