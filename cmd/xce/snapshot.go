package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/xce/xce/backup"
	"github.com/xce/xce/client"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/fence"
)

// snapshotCmd is `xce snapshot save|inspect|restore` (docs/operations.md,
// "Backup and restore").
func snapshotCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "Back up the cluster's state to a file, inspect one, restore one as a new cluster"}
	cmd.AddCommand(snapshotSaveCmd(), snapshotInspectCmd(), snapshotRestoreCmd())
	return cmd
}

// saveTimeout is save's default --timeout: the whole transfer, not one call.
const saveTimeout = 10 * time.Minute

func snapshotSaveCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "save FILE",
		Short: "Save a consistent snapshot, taken through the primary, to FILE",
		Long: "Save streams a snapshot from the cluster's primary (found through --addr, as every command finds it) into FILE.tmp, " +
			"syncs it, checks it against the checksum the primary sent and renames it to FILE. On any error no file is left.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			return f.call(func(ctx context.Context, c *client.Client) error {
				h, err := saveSnapshot(ctx, c, path)
				if err != nil {
					return err
				}
				if f.json {
					return printJSON(cmd.OutOrStdout(), map[string]any{
						"file": path, "cluster_id": h.ClusterID, "index": h.Index, "term": h.Term, "size": h.Size, "sha256": h.Sum(),
					})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "saved %s: cluster %s, index %d, term %d, %d bytes, sha256 %s\n",
					path, h.ClusterID, h.Index, h.Term, h.Size, h.Sum())
				return nil
			})
		},
	}
	f.register(cmd)
	f.timeout = saveTimeout
	cmd.Flags().Lookup("timeout").DefValue = saveTimeout.String()
	return cmd
}

// saveSnapshot writes the primary's snapshot to path.
func saveSnapshot(ctx context.Context, c *client.Client, path string) (backup.Header, error) {
	s, err := c.OpenSnapshot(ctx)
	if err != nil {
		return backup.Header{}, err
	}
	defer s.Close()
	if s.Format != backup.Version {
		return backup.Header{}, fmt.Errorf("the primary sends backup format %d, this binary writes format %d: use the cluster's xce version", s.Format, backup.Version)
	}
	w, err := backup.Create(path, s.ClusterID, s.Index, s.Term)
	if err != nil {
		return backup.Header{}, err
	}
	if _, err := io.Copy(w, s); err != nil {
		w.Abort()
		return backup.Header{}, err
	}
	size, sha := s.Trailer()
	return w.Commit(size, sha)
}

func snapshotInspectCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Verify a snapshot file and summarise what it holds",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := backup.Inspect(args[0])
			if err != nil && s.SHA256 == "" {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				if perr := printJSON(w, s); perr != nil {
					return perr
				}
				return err
			}
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "file\t%s (format %d)\n", args[0], s.Format)
			fmt.Fprintf(tw, "cluster\t%s\n", s.ClusterID)
			fmt.Fprintf(tw, "index/term\t%d / %d\n", s.Index, s.Term)
			fmt.Fprintf(tw, "data\t%d bytes, sha256 %s, checksum ok %v\n", s.Size, s.SHA256, s.ChecksumOK)
			if s.ChecksumOK {
				fmt.Fprintf(tw, "tasks\t%d\n", s.Tasks)
				fmt.Fprintf(tw, "assignment\tgeneration %d\n", s.AssignmentGeneration)
				fmt.Fprintf(tw, "outbox\t%d events held, published up to index %d\n", s.OutboxLen, s.Published)
				fmt.Fprintf(tw, "applied index\t%d\n", s.AppliedIndex)
			}
			if ferr := tw.Flush(); ferr != nil {
				return ferr
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func snapshotRestoreCmd() *cobra.Command {
	var cfgPath string
	var skipKafka, asJSON bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "restore FILE --config NODE.yaml",
		Short: "Fill one node's empty data dir from a snapshot file, as a member of a new cluster",
		Long: "Restore verifies FILE, then fills the data dir of the node NODE.yaml configures, which must be empty or absent, " +
			"so that the config's peers form a new cluster (its cluster_id) holding the snapshot. Restore every peer from the " +
			"same file, each with its own config, before starting any. With kafka.brokers set, the snapshot is installed past " +
			"the topic's last committed event, so the new cluster's events follow it with no duplicate and no gap.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cfgPath == "" {
				return usageErr("--config: required (the config of the node to restore)")
			}
			cfg, err := configs.Load(cfgPath)
			if err != nil {
				return usageErr("%v", err)
			}
			f, err := backup.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			if f.Header.ClusterID != cfg.ClusterID {
				fmt.Fprintf(errOut, "note: the snapshot was taken in cluster %q; the restored node is in cluster %q (the config's cluster_id)\n",
					f.Header.ClusterID, cfg.ClusterID)
			}
			floor, err := topicFloor(cfg, timeout, skipKafka, errOut)
			if err != nil {
				return err
			}
			r, err := backup.Restore(f, cfg, floor, nil)
			if err != nil {
				return fmt.Errorf("restore into %s: %w", cfg.DataDir, err)
			}
			if asJSON {
				return printJSON(out, map[string]any{
					"data_dir": r.DataDir, "node_id": cfg.NodeID, "cluster_id": r.ClusterID, "index": r.Index, "term": r.Term,
					"backup_index": f.Header.Index, "topic_last_index": floor, "voters": r.Voters, "tasks": r.Tasks,
				})
			}
			fmt.Fprintf(out, "restored %s into %s: node %s of cluster %s, %d tasks, snapshot at index %d term %d (backup index %d",
				args[0], r.DataDir, cfg.NodeID, r.ClusterID, r.Tasks, r.Index, r.Term, f.Header.Index)
			if len(cfg.Kafka.Brokers) > 0 {
				fmt.Fprintf(out, ", topic's last event %d", floor)
			}
			fmt.Fprintf(out, "), voters %s; start the node once every voter is restored\n", strings.Join(r.Voters, ","))
			return nil
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "the config of the node whose data dir to fill (required)")
	cmd.Flags().BoolVar(&skipKafka, "skip-kafka", false, "with kafka.brokers set but unreachable, restore at the snapshot's own index anyway (events may then be taken as already published)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "give up reading the events topic's last event after this long")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// topicFloor is the index of the last event on the config's topic (0
// without brokers): the restored cluster continues above it.
func topicFloor(cfg *configs.Config, timeout time.Duration, skip bool, warn io.Writer) (uint64, error) {
	if len(cfg.Kafka.Brokers) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	floor, err := lastPublished(ctx, cfg)
	switch {
	case err == nil:
		return floor, nil
	case skip:
		fmt.Fprintf(warn, "warning: cannot read the last event of topic %s (%v); --skip-kafka: restoring at the snapshot's own index, "+
			"so events the old cluster published after it may be taken as already published by the new one\n", cfg.Kafka.Topic, err)
		return 0, nil
	}
	return 0, fmt.Errorf("read the last event of topic %s at %s: %w; restore continues the cluster above it, so it needs the brokers "+
		"(--skip-kafka restores without, see docs/operations.md)", cfg.Kafka.Topic, strings.Join(cfg.Kafka.Brokers, ","), err)
}

func lastPublished(ctx context.Context, cfg *configs.Config) (uint64, error) {
	opts, err := cfg.KafkaSecurity().Opts(zerolog.Nop())
	if err != nil {
		return 0, err
	}
	floor, err := fence.LastPublished(ctx, cfg.Kafka.Brokers, cfg.Kafka.Topic, opts...)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return 0, fmt.Errorf("no answer within the timeout: %w", err)
	}
	return floor, err
}
