package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/xce/xce/client"
)

func placementCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "placement",
		Short: "Freeze or unfreeze the placement of tasks on workers",
	}
	cmd.AddCommand(freezeCmd(true), freezeCmd(false))
	return cmd
}

// freezeJSON is what `xce placement freeze|unfreeze --json` prints.
type freezeJSON struct {
	Frozen bool   `json:"frozen"`
	Index  uint64 `json:"index"`
}

// freezeCmd is `xce placement freeze` (freeze) or `xce placement unfreeze`.
func freezeCmd(freeze bool) *cobra.Command {
	var f clientFlags
	use, short, long := "unfreeze", "End a freeze of the placement: the assignor balances again",
		`End a freeze of the placement: the assignor plans for balance again and moves
copies as it would have (each move onto a worker that is not caught up waits for
a warm-up, as always).`
	if freeze {
		use, short, long = "freeze", "Hold the placement still: the assignor handles failures only",
			`Freeze the placement: the assignor handles failures only. An active whose
worker is gone or drained moves to a copy elsewhere, new tasks are placed and
missing standbys are created; no copy moves for balance and no new warm-up
starts. Use it to hold work in place during maintenance or an incident. The
freeze is kept in the cluster's log: it lasts across failovers until "xce
placement unfreeze". "xce status" and "xce assignment" say when it is on.`
	}
	cmd := &cobra.Command{
		Use: use, Short: short, Long: long,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(func(ctx context.Context, c *client.Client) error {
				index, err := c.FreezePlacement(ctx, freeze)
				if err != nil {
					return err
				}
				out := freezeJSON{Frozen: freeze, Index: index}
				if f.json {
					return printJSON(cmd.OutOrStdout(), out)
				}
				printFreeze(cmd.OutOrStdout(), out)
				return nil
			})
		},
	}
	f.register(cmd)
	return cmd
}

func printFreeze(w io.Writer, f freezeJSON) {
	if f.Frozen {
		fmt.Fprintf(w, "placement frozen at index %d: the assignor handles failures only until \"xce placement unfreeze\"\n", f.Index)
		return
	}
	fmt.Fprintf(w, "placement unfrozen at index %d: the assignor balances again\n", f.Index)
}
