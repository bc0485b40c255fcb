package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/xce/xce/assign"
	"github.com/xce/xce/client"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// clientFlags are shared by every command that talks to a cluster.
type clientFlags struct {
	addr    string
	timeout time.Duration
	json    bool
	creds   credFlags
}

func (f *clientFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.addr, "addr", envOr("XCE_ADDR", "127.0.0.1:7101"), "comma-separated HOST:PORT list of controller client addresses (env XCE_ADDR)")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 10*time.Second, "give up after this long (NOT_READY answers are retried until then)")
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON")
	f.creds.register(cmd.Flags())
}

func (f *clientFlags) client() (*client.Client, error) {
	return f.creds.newClient(strings.Split(f.addr, ","), client.Options{})
}

// call runs fn with a client over --addr and a context bounded by --timeout.
func (f *clientFlags) call(fn func(ctx context.Context, c *client.Client) error) error {
	c, err := f.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	return fn(ctx, c)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// statusJSON is `xce status --json` (docs/design.md, "Interfaces that tests and
// operators rely on").
type statusJSON struct {
	NodeID       string `json:"node_id"`
	ClusterID    string `json:"cluster_id"`
	Role         string `json:"role"`
	Reason       string `json:"reason"`
	Term         uint64 `json:"term"`
	LeaderID     string `json:"leader_id"`
	LeaderAddr   string `json:"leader_addr"`
	WriteQuorum  bool   `json:"write_quorum"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	KafkaEpoch   uint64 `json:"kafka_epoch"`
	OutboxLag    uint64 `json:"outbox_lag"`
	KafkaState   string `json:"kafka_state"`
	Tasks        uint64 `json:"tasks"`
	Backend      string `json:"backend"`
	// backend kafka only: members in rank order and the lease.
	Roster        []rosterJSON `json:"roster,omitempty"`
	LeaseHolder   string       `json:"lease_holder,omitempty"`
	LeaseDeadline string       `json:"lease_deadline,omitempty"`
	Pid           int64        `json:"pid"`
	Version       string       `json:"version"`
	// LogFormat is the newest Raft log format the node's binary applies.
	LogFormat uint32 `json:"log_format"`
	UptimeMs  int64  `json:"uptime_ms"`
	// Security: insecure: true, permissions on or off, certificate expiry.
	Insecure          bool   `json:"insecure"`
	Auth              string `json:"auth"`
	TLSCertExpiry     string `json:"tls_cert_expiry,omitempty"`
	PeerTLSCertExpiry string `json:"peer_tls_cert_expiry,omitempty"`
	// backend raft: the configuration as this node knows it.
	Members []statusMemberJSON `json:"members,omitempty"`
	// PlacementFrozen: an operator froze the placement (xce placement
	// freeze).
	PlacementFrozen bool `json:"placement_frozen"`
	// Startup: the phases of the node's start that have ended
	// (docs/operations.md, "Restarts").
	Startup []startupPhaseJSON `json:"startup,omitempty"`
}

type startupPhaseJSON struct {
	Name        string  `json:"name"`
	AtSeconds   float64 `json:"at_seconds"`
	TookSeconds float64 `json:"took_seconds,omitempty"`
}

type statusMemberJSON struct {
	ID         string `json:"id"`
	PeerAddr   string `json:"peer_addr"`
	ClientAddr string `json:"client_addr"`
	Voter      bool   `json:"voter"`
	Primary    bool   `json:"primary"`
}

type rosterJSON struct {
	Member string `json:"member"`
	Rank   uint32 `json:"rank"`
	Offset int64  `json:"offset"`
}

func roleString(r xcev1.Role) string { return strings.TrimPrefix(r.String(), "ROLE_") }

func statusCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print one node's status (answered in every role)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(func(ctx context.Context, c *client.Client) error {
				ep := c.Endpoints()[0]
				s, err := c.Status(ctx, ep)
				if err != nil {
					return fmt.Errorf("status of %s: %w", ep, err)
				}
				out := statusJSON{
					NodeID: s.NodeId, ClusterID: s.ClusterId, Role: roleString(s.Role), Reason: s.Reason, Term: s.Term,
					LeaderID: s.LeaderId, LeaderAddr: s.LeaderAddr, WriteQuorum: s.WriteQuorum,
					CommitIndex: s.CommitIndex, AppliedIndex: s.AppliedIndex, KafkaEpoch: s.KafkaEpoch, OutboxLag: s.OutboxLag, KafkaState: s.KafkaState,
					Tasks: s.Tasks, Backend: s.Backend, Pid: s.Pid, Version: s.Version, LogFormat: s.LogFormat, UptimeMs: s.UptimeMs,
					LeaseHolder: s.LeaseHolder,
					Insecure:    s.Insecure, Auth: s.Auth, TLSCertExpiry: s.TlsCertExpiry, PeerTLSCertExpiry: s.PeerTlsCertExpiry,
					PlacementFrozen: s.PlacementFrozen,
				}
				if s.LeaseDeadlineUnixMs > 0 {
					out.LeaseDeadline = time.UnixMilli(s.LeaseDeadlineUnixMs).UTC().Format(time.RFC3339Nano)
				}
				for _, m := range s.Roster {
					out.Roster = append(out.Roster, rosterJSON{Member: m.MemberId, Rank: m.Rank, Offset: m.Offset})
				}
				for _, m := range s.Members {
					out.Members = append(out.Members, statusMemberJSON{ID: m.Id, PeerAddr: m.PeerAddr, ClientAddr: m.ClientAddr, Voter: m.Voter, Primary: m.Primary})
				}
				for _, p := range s.Startup {
					out.Startup = append(out.Startup, startupPhaseJSON{Name: p.Name, AtSeconds: p.AtSeconds, TookSeconds: p.TookSeconds})
				}
				w := cmd.OutOrStdout()
				if f.json {
					return printJSON(w, out)
				}
				tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
				fmt.Fprintf(tw, "node\t%s (cluster %s, pid %d, version %s, log format %d)\n", out.NodeID, out.ClusterID, out.Pid, out.Version, out.LogFormat)
				fmt.Fprintf(tw, "role\t%s (%s)\n", out.Role, out.Reason)
				fmt.Fprintf(tw, "term\t%d\n", out.Term)
				fmt.Fprintf(tw, "leader\t%s %s\n", out.LeaderID, out.LeaderAddr)
				fmt.Fprintf(tw, "write quorum\t%v\n", out.WriteQuorum)
				fmt.Fprintf(tw, "commit/applied\t%d / %d\n", out.CommitIndex, out.AppliedIndex)
				fmt.Fprintf(tw, "tasks\t%d\n", out.Tasks)
				fmt.Fprintf(tw, "kafka\t%s, epoch %d, outbox lag %d\n", out.KafkaState, out.KafkaEpoch, out.OutboxLag)
				fmt.Fprintf(tw, "backend\t%s\n", out.Backend)
				fmt.Fprintf(tw, "security\tauth %s, insecure %v, tls cert expires %q, peer cert expires %q\n", out.Auth, out.Insecure, out.TLSCertExpiry, out.PeerTLSCertExpiry)
				for _, m := range out.Members {
					kind := "voter"
					if !m.Voter {
						kind = "non-voter"
					}
					fmt.Fprintf(tw, "member %s\t%s, peer %s, client %s\n", m.ID, kind, m.PeerAddr, m.ClientAddr)
				}
				if out.Backend == "kafka" {
					fmt.Fprintf(tw, "lease\t%s until %s\n", out.LeaseHolder, out.LeaseDeadline)
					for _, m := range out.Roster {
						fmt.Fprintf(tw, "rank %d\t%s (registered at offset %d)\n", m.Rank, m.Member, m.Offset)
					}
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				if out.PlacementFrozen {
					fmt.Fprintln(w, "placement: frozen")
				}
				return nil
			})
		},
	}
	f.register(cmd)
	return cmd
}

// taskJSON is a task as the CLI prints it.
type taskJSON struct {
	TaskID          string `json:"task_id"`
	Stateful        bool   `json:"stateful"`
	StandbyReplicas uint32 `json:"standby_replicas"`
	Weight          uint32 `json:"weight"`
	CreatedIndex    uint64 `json:"created_index"`
	State           string `json:"state"`
	PendingReason   string `json:"pending_reason,omitempty"`
}

func taskOut(t *xcev1.Task) taskJSON {
	return taskJSON{TaskID: t.TaskId, Stateful: t.Stateful, StandbyReplicas: t.StandbyReplicas, Weight: max(t.Weight, 1),
		CreatedIndex: t.CreatedIndex, State: t.State, PendingReason: t.PendingReason}
}

func printTasks(w io.Writer, ts []*xcev1.Task) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATEFUL\tSTANDBYS\tWEIGHT\tCREATED\tSTATE")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%v\t%d\t%d\t%d\t%s\n", t.TaskId, t.Stateful, t.StandbyReplicas, max(t.Weight, 1), t.CreatedIndex, t.State)
	}
	return tw.Flush()
}

func submitCmd() *cobra.Command {
	var f clientFlags
	var standbys, weight uint32
	var stateful bool
	cmd := &cobra.Command{
		Use:   "submit TASK",
		Short: "Submit a task (retried through elections; applied once)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if weight < 1 || weight > assign.MaxWeight {
				return usageErr("--weight: %d is not between 1 and %d", weight, assign.MaxWeight)
			}
			return f.call(func(ctx context.Context, c *client.Client) error {
				r, err := c.Submit(ctx, client.Task{ID: args[0], Stateful: stateful, StandbyReplicas: standbys, Weight: weight})
				if err != nil {
					return err
				}
				if f.json {
					return printJSON(cmd.OutOrStdout(), map[string]any{"task": taskOut(r.Task), "index": r.Index})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "submitted %s at index %d\n", r.Task.TaskId, r.Index)
				return nil
			})
		},
	}
	f.register(cmd)
	cmd.Flags().Uint32Var(&standbys, "standbys", 0,
		fmt.Sprintf("standby replicas wanted for a stateful task, at most %d (0: the cluster's assignor.num_standby_replicas)", assign.MaxStandbyReplicas))
	cmd.Flags().BoolVar(&stateful, "stateful", false, "the task keeps state")
	cmd.Flags().Uint32Var(&weight, "weight", 1,
		fmt.Sprintf("what the task costs relative to others, 1 to %d: the assignor balances weight over capacity", assign.MaxWeight))
	return cmd
}

func taskCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "task", Short: "Read or delete one task"}
	var gf clientFlags
	var stale bool
	get := &cobra.Command{
		Use:   "get TASK",
		Short: "Read a task (linearizable unless --stale)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return gf.call(func(ctx context.Context, c *client.Client) error {
				r, err := c.Get(ctx, args[0], stale)
				if err != nil {
					return err
				}
				if gf.json {
					return printJSON(cmd.OutOrStdout(), map[string]any{"task": taskOut(r.Task), "applied_index": r.AppliedIndex})
				}
				return printTasks(cmd.OutOrStdout(), []*xcev1.Task{r.Task})
			})
		},
	}
	gf.register(get)
	get.Flags().BoolVar(&stale, "stale", false, "accept a stale read from a STANDBY")
	var df clientFlags
	del := &cobra.Command{
		Use:   "delete TASK",
		Short: "Delete a task",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return df.call(func(ctx context.Context, c *client.Client) error {
				r, err := c.Delete(ctx, args[0])
				if err != nil {
					return err
				}
				if df.json {
					return printJSON(cmd.OutOrStdout(), map[string]any{"task_id": args[0], "index": r.Index})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted %s at index %d\n", args[0], r.Index)
				return nil
			})
		},
	}
	df.register(del)
	cmd.AddCommand(get, del)
	return cmd
}

func tasksCmd() *cobra.Command {
	var f clientFlags
	var stale bool
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "List every task",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(func(ctx context.Context, c *client.Client) error {
				ts, err := c.List(ctx, stale)
				if err != nil {
					return err
				}
				if f.json {
					out := make([]taskJSON, len(ts))
					for i, t := range ts {
						out[i] = taskOut(t)
					}
					return printJSON(cmd.OutOrStdout(), map[string]any{"tasks": out})
				}
				return printTasks(cmd.OutOrStdout(), ts)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&stale, "stale", false, "accept a stale read from a STANDBY")
	return cmd
}
