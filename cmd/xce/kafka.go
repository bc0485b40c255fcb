package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/fence"
)

// defaultEventsTopic is the events topic unless kafka.topic says otherwise.
const defaultEventsTopic = "xce.events"

func kafkaDevCmd() *cobra.Command {
	var addr, dataDir string
	var topics []string
	cmd := &cobra.Command{
		Use:   "kafka-dev",
		Short: "Run an in-process Kafka broker (kfake) for development and tests",
		Long: `Run an in-process Kafka broker with the controller's topics created. Its log is
kept in memory unless --data-dir is given; with one, a restarted broker keeps
what was committed. Not for production: real deployments set kafka.brokers to
their cluster.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			host, portStr, err := net.SplitHostPort(addr)
			if err != nil {
				return usageErr("--addr %q: %v", addr, err)
			}
			port, err := strconv.Atoi(portStr)
			if err != nil || port < 0 || port > 65535 {
				return usageErr("--addr %q: invalid port", addr)
			}
			opts := []kfake.Opt{
				kfake.Ports(port),
				kfake.ListenFn(func(network, _ string) (net.Listener, error) {
					return net.Listen(network, net.JoinHostPort(host, strconv.Itoa(port)))
				}),
				kfake.SeedTopics(1, topics...),
				kfake.ClusterID("xce-dev"),
			}
			if dataDir != "" {
				opts = append(opts, kfake.DataDir(dataDir), kfake.SyncWrites())
			}
			c, err := kfake.NewCluster(opts...)
			if err != nil {
				return fmt.Errorf("kafka-dev: %w", err)
			}
			defer c.Close()
			where := "memory"
			if dataDir != "" {
				where = dataDir
			}
			fmt.Fprintf(cmd.OutOrStdout(), "kafka-dev listening on %s (topics %s; log in %s)\n",
				strings.Join(c.ListenAddrs(), ","), strings.Join(topics, ","), where)
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			<-ctx.Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:9092", "listen address")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "keep the broker's log here across restarts")
	cmd.Flags().StringSliceVar(&topics, "topic", []string{defaultEventsTopic}, "topics to create (one partition each)")
	return cmd
}

func eventsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "events", Short: "Read the controller's downstream events"}
	var brokers, topic string
	var fromStart, asJSON bool
	tail := &cobra.Command{
		Use:   "tail",
		Short: "Print committed events (read_committed) with their term, index and epoch",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			start := kgo.NewOffset().AtEnd()
			if fromStart {
				start = kgo.NewOffset().AtStart()
			}
			cl, err := kgo.NewClient(
				kgo.SeedBrokers(strings.Split(brokers, ",")...),
				kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: start}}),
				kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			)
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			enc := json.NewEncoder(out)
			for {
				fs := cl.PollFetches(ctx)
				if ctx.Err() != nil {
					return nil
				}
				for _, fe := range fs.Errors() {
					fmt.Fprintf(cmd.ErrOrStderr(), "xce: %s[%d]: %v\n", fe.Topic, fe.Partition, fe.Err)
				}
				var perr error
				fs.EachRecord(func(r *kgo.Record) {
					p, err := fence.Decode(r)
					if err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "xce: offset %d: %v\n", r.Offset, err)
						return
					}
					if asJSON {
						perr = enc.Encode(map[string]any{
							"offset": p.Offset, "key": p.Key, "term": p.Term, "index": p.Index, "epoch": p.Epoch,
							"kind": p.Event.Kind, "task_id": p.Event.TaskID, "timestamp": r.Timestamp.UTC().Format(time.RFC3339Nano),
						})
						return
					}
					fmt.Fprintf(out, "offset=%d term=%d index=%d epoch=%d %s %s\n", p.Offset, p.Term, p.Index, p.Epoch, p.Event.Kind, p.Event.TaskID)
				})
				if perr != nil {
					return perr
				}
			}
		},
	}
	tail.Flags().StringVar(&brokers, "brokers", "127.0.0.1:9092", "comma-separated bootstrap brokers")
	tail.Flags().StringVar(&topic, "topic", defaultEventsTopic, "events topic")
	tail.Flags().BoolVar(&fromStart, "from-start", false, "read from the first event (default: only new ones)")
	tail.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line")
	cmd.AddCommand(tail)
	return cmd
}
