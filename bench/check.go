package bench

import (
	"fmt"
	"math"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

type modelInput struct {
	kind Kind
	id   string
}

type modelOutput struct {
	outcome Outcome
}

// Model is the task registry as porcupine sees it: each task id is an
// independent register "exists", so the history is partitioned by id.
// An unknown outcome may or may not have taken effect (nondeterminism).
var Model = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byID := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range h {
			id := op.Input.(modelInput).id
			if _, ok := byID[id]; !ok {
				order = append(order, id)
			}
			byID[id] = append(byID[id], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, id := range order {
			out = append(out, byID[id])
		}
		return out
	},
	Init: func() []any { return []any{false} },
	Step: func(state, input, output any) []any {
		exists := state.(bool)
		in, out := input.(modelInput), output.(modelOutput)
		switch in.kind {
		case Submit:
			switch out.outcome {
			case OK:
				if !exists {
					return []any{true}
				}
			case Exists:
				if exists {
					return []any{true}
				}
			case Unknown:
				return []any{exists, true}
			}
		case Get:
			switch out.outcome {
			case OK:
				if exists {
					return []any{true}
				}
			case NotFound:
				if !exists {
					return []any{false}
				}
			case Unknown:
				return []any{exists}
			}
		case Delete:
			switch out.outcome {
			case OK:
				if exists {
					return []any{false}
				}
			case NotFound:
				if !exists {
					return []any{false}
				}
			case Unknown:
				return []any{exists, false}
			}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(modelInput), output.(modelOutput)
		return fmt.Sprintf("%s(%s) -> %s", in.kind, in.id, out.outcome)
	},
	DescribeState: func(state any) string {
		if state.(bool) {
			return "exists"
		}
		return "absent"
	},
}

// Verdict is the outcome of checking a history.
type Verdict struct {
	Linearizable bool
	// CheckResult is porcupine's answer: ok, illegal or unknown (timeout).
	CheckResult string
	// Lost counts acknowledged submits whose task is missing at the end.
	Lost int
	// Duplicates counts submits of a fresh id answered "exists": the
	// first attempt applied and a retry applied again.
	Duplicates int
	// Acked counts acknowledged submits.
	Acked int
	// HistoryFile is porcupine's HTML visualisation, when written.
	HistoryFile string
}

// OK reports whether the verdict holds no violation.
func (v Verdict) OK() bool { return v.Linearizable && v.Lost == 0 && v.Duplicates == 0 }

// Check verifies ops: linearizability (porcupine, bounded by timeout),
// every acknowledged submit present in final (the ids of every task at the
// end), and no submit applied twice. Unique ids per submit are assumed, as
// the load generator makes them. When htmlPath is set and the check fails,
// porcupine's visualisation is written there.
func Check(ops []Op, final map[string]bool, timeout time.Duration, htmlPath string) (Verdict, error) {
	var v Verdict
	start := ops[0].Call
	for _, op := range ops {
		if op.Call.Before(start) {
			start = op.Call
		}
	}
	hist := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		ret := int64(math.MaxInt64)
		if op.Outcome != Unknown {
			ret = op.Return.Sub(start).Nanoseconds()
		}
		hist = append(hist, porcupine.Operation{
			ClientId: op.Client,
			Input:    modelInput{kind: op.Kind, id: op.TaskID},
			Call:     op.Call.Sub(start).Nanoseconds(),
			Output:   modelOutput{outcome: op.Outcome},
			Return:   ret,
		})
		if op.Kind == Submit {
			switch op.Outcome {
			case OK:
				v.Acked++
				if !final[op.TaskID] {
					v.Lost++
				}
			case Exists:
				v.Duplicates++
			}
		}
	}
	m := Model.ToModel()
	res, info := porcupine.CheckOperationsVerbose(m, hist, timeout)
	v.CheckResult = string(res)
	v.Linearizable = res == porcupine.Ok
	if !v.OK() && htmlPath != "" {
		f, err := os.Create(htmlPath)
		if err != nil {
			return v, err
		}
		defer f.Close()
		if err := porcupine.Visualize(m, info, f); err != nil {
			return v, err
		}
		v.HistoryFile = htmlPath
	}
	return v, nil
}
