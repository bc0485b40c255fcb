package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/xce/xce/client"
	"github.com/xce/xce/configs"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// memberJSON is a member as `xce members` prints it (docs/design.md,
// "Interfaces that tests and operators rely on").
type memberJSON struct {
	ID         string `json:"id"`
	PeerAddr   string `json:"peer_addr"`
	ClientAddr string `json:"client_addr"`
	Voter      bool   `json:"voter"`
	Healthy    bool   `json:"healthy"`
	// LastContactMs: -1 when unknown.
	LastContactMs int64  `json:"last_contact_ms"`
	Lag           uint64 `json:"lag"`
	Primary       bool   `json:"primary"`
	State         string `json:"state"`
}

func memberOut(m *xcev1.Member) memberJSON {
	return memberJSON{ID: m.Id, PeerAddr: m.PeerAddr, ClientAddr: m.ClientAddr, Voter: m.Voter, Healthy: m.Healthy,
		LastContactMs: m.LastContactMs, Lag: m.Lag, Primary: m.Primary, State: m.State}
}

// membersJSON is `xce members list --json`.
type membersJSON struct {
	ConfigurationIndex uint64       `json:"configuration_index"`
	Members            []memberJSON `json:"members"`
}

func voterCell(voter bool) string {
	if voter {
		return "voter"
	}
	return "non-voter"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func contactCell(ms int64) string {
	if ms < 0 {
		return "unknown"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

func printMembers(w io.Writer, r *xcev1.ListMembersResponse) error {
	voters := 0
	for _, m := range r.Members {
		if m.Voter {
			voters++
		}
	}
	fmt.Fprintf(w, "configuration index %d, %d members, %d voters\n", r.ConfigurationIndex, len(r.Members), voters)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPEER\tCLIENT\tVOTER\tHEALTHY\tLAST CONTACT\tLAG\tSTATE\tROLE")
	for _, m := range r.Members {
		role := ""
		if m.Primary {
			role = "PRIMARY"
		}
		client := m.ClientAddr
		if client == "" {
			client = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", m.Id, m.PeerAddr, client, voterCell(m.Voter), yesNo(m.Healthy),
			contactCell(m.LastContactMs), m.Lag, m.State, role)
	}
	return tw.Flush()
}

// checkAddrs refuses an --addr list with a bad address before anything is
// sent.
func (f *clientFlags) checkAddrs() error {
	for _, a := range strings.Split(f.addr, ",") {
		if err := configs.CheckDialAddr(strings.TrimSpace(a)); err != nil {
			return usageErr("--addr %q: %v", a, err)
		}
	}
	return nil
}

// checkID refuses a member id the configs would refuse.
func checkID(what, id string) error {
	if id == "" {
		return usageErr("%s is required", what)
	}
	if !configs.ValidID(id) {
		return usageErr("%s %q: must be 1-64 characters of [A-Za-z0-9._-]", what, id)
	}
	return nil
}

func membersCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "members",
		Short: "List and change the members of the Raft configuration (through the PRIMARY)",
		Long: `List and change the members of the Raft configuration. Every command goes to the
PRIMARY, following NOT_READY hints like the other client commands; changes need the
admin role where permissions are on. A change retried after an answer that never came
is either answered as made (an add, a promotion) or checked against the configuration
first (a removal, a transfer), so it is never made twice
(docs/operations.md, "Changing the members").`,
	}
	cmd.AddCommand(membersListCmd(), membersAddCmd(), membersRemoveCmd(), membersPromoteCmd())
	return cmd
}

func membersListCmd() *cobra.Command {
	var f clientFlags
	var stale bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the members: addresses, voter or not, health, last contact, lag, state, the PRIMARY",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.checkAddrs(); err != nil {
				return err
			}
			return f.call(func(ctx context.Context, c *client.Client) error {
				r, err := c.ListMembers(ctx, stale)
				if errors.Is(err, client.ErrNotReady) && !stale {
					// Without a PRIMARY a STANDBY still knows the members.
					return fmt.Errorf("%w (--stale lists a STANDBY's view)", err)
				}
				if err != nil {
					return err
				}
				if f.json {
					out := membersJSON{ConfigurationIndex: r.ConfigurationIndex, Members: []memberJSON{}}
					for _, m := range r.Members {
						out.Members = append(out.Members, memberOut(m))
					}
					return printJSON(cmd.OutOrStdout(), out)
				}
				return printMembers(cmd.OutOrStdout(), r)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&stale, "stale", false, "accept a STANDBY's list (members and PRIMARY only: no health or lag), e.g. without a quorum")
	return cmd
}

// printMember reports one member after a change.
func printMember(w io.Writer, jsonOut bool, verb string, m *xcev1.Member) error {
	if jsonOut {
		return printJSON(w, map[string]any{"member": memberOut(m)})
	}
	fmt.Fprintf(w, "%s %s (peer %s, client %s): %s, %s\n", verb, m.Id, m.PeerAddr, m.ClientAddr, voterCell(m.Voter), m.State)
	return nil
}

func membersAddCmd() *cobra.Command {
	var f clientFlags
	var id, peerAddr, clientAddr string
	cmd := &cobra.Command{
		Use:   "add --id ID --peer-addr HOST:PORT --client-addr HOST:PORT",
		Short: "Add a member as a non-voter; the PRIMARY promotes it once it has caught up",
		Long: `Add a member as a non-voter. The PRIMARY promotes it to voter once it has caught up
and stayed caught up (xce members promote does it at once). Adding a member that is
already there with the same addresses succeeds ("already a member").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkID("--id", id); err != nil {
				return err
			}
			if err := configs.CheckDialAddr(peerAddr); err != nil {
				return usageErr("--peer-addr %q: %v", peerAddr, err)
			}
			if clientAddr != "" {
				if err := configs.CheckDialAddr(clientAddr); err != nil {
					return usageErr("--client-addr %q: %v", clientAddr, err)
				}
			}
			if err := f.checkAddrs(); err != nil {
				return err
			}
			return f.call(func(ctx context.Context, c *client.Client) error {
				m, err := c.AddMember(ctx, id, peerAddr, clientAddr)
				if err != nil {
					return fmt.Errorf("add %s: %w", id, err)
				}
				return printMember(cmd.OutOrStdout(), f.json, "added", m)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&id, "id", "", "the new member's node_id")
	cmd.Flags().StringVar(&peerAddr, "peer-addr", "", "its peer_addr, where the others reach it")
	cmd.Flags().StringVar(&clientAddr, "client-addr", "", "its client_addr, where clients reach it")
	return cmd
}

func membersRemoveCmd() *cobra.Command {
	var f clientFlags
	var force bool
	cmd := &cobra.Command{
		Use:   "remove ID",
		Short: "Remove a member, voter or not",
		Long: `Remove a member, voter or not. The PRIMARY refuses to remove a voter when the healthy
voters left could not form a quorum; --force removes it anyway. A member already gone
is "not a member" (exit 4), unless an earlier attempt of the same command removed it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := checkID("member id", id); err != nil {
				return err
			}
			if err := f.checkAddrs(); err != nil {
				return err
			}
			return f.call(func(ctx context.Context, c *client.Client) error {
				err := c.RemoveMember(ctx, id, force)
				if errors.Is(err, client.ErrFailedPrecondition) && !force {
					return fmt.Errorf("remove %s: %w (--force removes it anyway)", id, err)
				}
				if err != nil {
					return fmt.Errorf("remove %s: %w", id, err)
				}
				if f.json {
					return printJSON(cmd.OutOrStdout(), map[string]any{"removed": id})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", id)
				return nil
			})
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&force, "force", false, "remove even when the healthy voters left could not form a quorum")
	return cmd
}

func membersPromoteCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "promote ID",
		Short: "Make a caught-up non-voter a voter now",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := checkID("member id", id); err != nil {
				return err
			}
			if err := f.checkAddrs(); err != nil {
				return err
			}
			return f.call(func(ctx context.Context, c *client.Client) error {
				m, err := c.PromoteMember(ctx, id)
				if err != nil {
					return fmt.Errorf("promote %s: %w", id, err)
				}
				return printMember(cmd.OutOrStdout(), f.json, "promoted", m)
			})
		},
	}
	f.register(cmd)
	return cmd
}

func leaderCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "leader", Short: "Move the leadership (the PRIMARY role)"}
	var f clientFlags
	var to string
	var ifPrimary bool
	transfer := &cobra.Command{
		Use:   "transfer [--to ID]",
		Short: "Hand the PRIMARY role to another voter (--to, or the most caught-up one)",
		Long: `Hand the PRIMARY role to another voter: --to names it, otherwise the most caught-up
voter takes it. Returns once the leadership has moved, and prints the new PRIMARY.
Clients follow it through their NOT_READY hints.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if to != "" {
				if err := checkID("--to", to); err != nil {
					return err
				}
			}
			if err := f.checkAddrs(); err != nil {
				return err
			}
			return f.call(func(ctx context.Context, c *client.Client) error {
				if ifPrimary {
					addr := strings.Split(f.addr, ",")[0]
					st, err := c.Status(ctx, addr)
					if err != nil {
						return fmt.Errorf("leader transfer: status of %s: %w", addr, err)
					}
					if st.Role != xcev1.Role_ROLE_PRIMARY {
						fmt.Fprintf(cmd.OutOrStdout(), "%s is %s: nothing to hand on\n", st.NodeId, roleString(st.Role))
						return nil
					}
				}
				leader, err := c.TransferLeader(ctx, to)
				if err != nil {
					return fmt.Errorf("leader transfer: %w", err)
				}
				if f.json {
					return printJSON(cmd.OutOrStdout(), map[string]any{"leader_id": leader})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s is PRIMARY\n", leader)
				return nil
			})
		},
	}
	f.register(transfer)
	transfer.Flags().StringVar(&to, "to", "", "the voter to hand the leadership to (default: the most caught-up)")
	transfer.Flags().BoolVar(&ifPrimary, "if-primary", false, "hand it on only when the node at the first --addr is the PRIMARY, otherwise do nothing (a node's stop hook)")
	cmd.AddCommand(transfer)
	return cmd
}
