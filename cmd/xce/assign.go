package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
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
		AcceptableRecoveryLag    *int64   `json:"acceptable_recovery_lag"`
		MaxWarmupReplicas        *int     `json:"max_warmup_replicas"`
		NumStandbyReplicas       *int     `json:"num_standby_replicas"`
		ProbingRebalanceInterval *string  `json:"probing_rebalance_interval"`
		SpreadBy                 []string `json:"spread_by"`
		Balance                  *string  `json:"balance"`
		LoadTolerance            *int     `json:"load_tolerance"`
		MaxLoadMoves             *int     `json:"max_load_moves"`
		MinCopies                *int     `json:"min_copies"`
		// ReplaceDelay above 0 plans the workers previous names that are
		// missing from workers as away (within the delay) rather than gone.
		ReplaceDelay *string `json:"replace_delay"`
	} `json:"config"`
	Tasks []struct {
		ID       string `json:"id"`
		Stateful bool   `json:"stateful"`
		// StandbyReplicas is the task's own standby count, as `xce submit
		// --standbys` records it: 0 means num_standby_replicas.
		StandbyReplicas int `json:"standby_replicas"`
		// Weight as `xce submit --weight` records it: 0 means 1.
		Weight int `json:"weight"`
	} `json:"tasks"`
	Workers []struct {
		ID       string            `json:"id"`
		Capacity int               `json:"capacity"`
		Lags     map[string]int64  `json:"lags"`
		Labels   map[string]string `json:"labels"`
		Loads    map[string]int64  `json:"loads"`
		// Drained: drained by an operator, or leaving (assign.Worker).
		Drained bool `json:"drained"`
		// Away: its session ended within the replacement delay.
		Away bool `json:"away"`
	} `json:"workers"`
	Previous map[string]placementJSON `json:"previous"`
	// Frozen plans as `xce placement freeze` does.
	Frozen bool `json:"frozen"`
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
	// With config.replace_delay they are planned as away instead, and
	// are not listed.
	Departed []string `json:"departed"`
	// Unspread lists where a task's copies span fewer values of a
	// spread_by key than the workers offer, and why.
	Unspread []shortfallJSON `json:"unspread"`
}

type shortfallJSON struct {
	Task   string `json:"task"`
	Key    string `json:"key"`
	Have   int    `json:"have"`
	Want   int    `json:"want"`
	Reason string `json:"reason"`
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
	cfg, delay, err := in.config()
	if err != nil {
		return assign.Input{}, err
	}
	out := assign.Input{Config: cfg, Previous: assign.Assignment{}, Frozen: in.Frozen}
	tasks, err := in.tasks(&out)
	if err != nil {
		return out, err
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
		if err := checkPerTask(fmt.Sprintf("workers[%d].lags", i), w.Lags, tasks); err != nil {
			return out, err
		}
		if err := checkPerTask(fmt.Sprintf("workers[%d].loads", i), w.Loads, tasks); err != nil {
			return out, err
		}
		if err := assign.CheckLabels(w.Labels); err != nil {
			return out, fmt.Errorf("workers[%d].labels: %v", i, err)
		}
		out.Workers = append(out.Workers, assign.Worker{ID: w.ID, Capacity: w.Capacity, Lags: w.Lags, Drained: w.Drained,
			Labels: w.Labels, Loads: w.Loads, Away: w.Away})
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
	if delay > 0 {
		// Within the replacement delay a departed worker is away: its
		// copies are kept for it.
		for _, id := range departedWorkers(out) {
			out.Workers = append(out.Workers, assign.Worker{ID: id, Away: true})
		}
	}
	return out, nil
}

// checkPerTask checks a worker's per-task numbers (lags, loads): known
// tasks, nothing negative.
func checkPerTask(field string, m map[string]int64, tasks map[string]bool) error {
	for _, task := range slices.Sorted(maps.Keys(m)) {
		if !tasks[task] {
			return fmt.Errorf("%s: unknown task %q", field, task)
		}
		if m[task] < 0 {
			return fmt.Errorf("%s[%q]: %d is negative", field, task, m[task])
		}
	}
	return nil
}

// tasks converts the input's tasks into out and returns the set of ids.
func (in *planInput) tasks(out *assign.Input) (map[string]bool, error) {
	tasks := map[string]bool{}
	for i, t := range in.Tasks {
		if t.ID == "" {
			return nil, fmt.Errorf("tasks[%d].id: empty", i)
		}
		if tasks[t.ID] {
			return nil, fmt.Errorf("tasks[%d].id: duplicate %q", i, t.ID)
		}
		switch {
		case t.StandbyReplicas < 0:
			return nil, fmt.Errorf("tasks[%d].standby_replicas: %d is negative", i, t.StandbyReplicas)
		case t.StandbyReplicas > assign.MaxStandbyReplicas:
			return nil, fmt.Errorf("tasks[%d].standby_replicas: %d is more than %d", i, t.StandbyReplicas, assign.MaxStandbyReplicas)
		case t.Weight < 0 || t.Weight > assign.MaxWeight:
			return nil, fmt.Errorf("tasks[%d].weight: %d is outside 1..%d", i, t.Weight, assign.MaxWeight)
		}
		tasks[t.ID] = true
		out.Tasks = append(out.Tasks, assign.Task{ID: t.ID, Stateful: t.Stateful, StandbyReplicas: t.StandbyReplicas, Weight: t.Weight})
	}
	return tasks, nil
}

// config reads the input's config over the defaults, and its
// replace_delay.
func (in *planInput) config() (assign.Config, time.Duration, error) {
	cfg := assign.DefaultConfig()
	c := in.Config
	if c.AcceptableRecoveryLag != nil {
		cfg.AcceptableRecoveryLag = *c.AcceptableRecoveryLag
	}
	setInt := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	setInt(&cfg.MaxWarmupReplicas, c.MaxWarmupReplicas)
	setInt(&cfg.NumStandbyReplicas, c.NumStandbyReplicas)
	setInt(&cfg.LoadTolerance, c.LoadTolerance)
	setInt(&cfg.MaxLoadMoves, c.MaxLoadMoves)
	setInt(&cfg.MinCopies, c.MinCopies)
	if c.Balance != nil {
		cfg.Balance = *c.Balance
	}
	cfg.SpreadBy = c.SpreadBy
	if c.ProbingRebalanceInterval != nil {
		d, err := time.ParseDuration(*c.ProbingRebalanceInterval)
		if err != nil {
			return cfg, 0, fmt.Errorf("config.probing_rebalance_interval: %v", err)
		}
		cfg.ProbingRebalanceInterval = d
	}
	var delay time.Duration
	if c.ReplaceDelay != nil {
		d, err := time.ParseDuration(*c.ReplaceDelay)
		if err != nil || d < 0 {
			return cfg, 0, fmt.Errorf("config.replace_delay: %q is not a duration of 0 or more", *c.ReplaceDelay)
		}
		delay = d
	}
	if err := cfg.Validate(); err != nil {
		return cfg, 0, fmt.Errorf("config: %w", err)
	}
	return cfg, delay, nil
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
			out.Unspread = []shortfallJSON{}
			for _, sf := range res.Unspread {
				out.Unspread = append(out.Unspread, shortfallJSON{Task: sf.Task, Key: sf.Key, Have: sf.Have, Want: sf.Want, Reason: sf.Reason})
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
			if len(out.Unspread) > 0 {
				fmt.Fprintf(w, "\nspread not met (%d):\n", len(out.Unspread))
				for _, sf := range out.Unspread {
					fmt.Fprintf(w, "  %s: %d of %d values of %s (%s)\n", sf.Task, sf.Have, sf.Want, sf.Key, sf.Reason)
				}
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
