package main

import (
	"context"
	"errors"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xce/xce/client"
	"github.com/xce/xce/logging"
	"github.com/xce/xce/worker"
	"github.com/xce/xce/worker/kvworker"
)

// kvWorkerFlags are the flags of `xce worker --store`: the Kafka-backed
// worker instead of the simulator.
type kvWorkerFlags struct {
	store, brokers string
	kafka          kafkaSecurityFlags
}

func (f *kvWorkerFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.store, "store", "", "run the Kafka-backed worker with its task stores in this directory (input-<p> tasks: partition p of xce.input)")
	fl.StringVar(&f.brokers, "brokers", "127.0.0.1:9092", "with --store: comma-separated bootstrap brokers")
	f.kafka.register(cmd)
}

// runKVWorker runs the Kafka-backed worker until ctx ends.
func runKVWorker(ctx context.Context, f *workerFlags, stderr io.Writer) error {
	cfg, _, err := f.config()
	if err != nil {
		return err
	}
	log, err := logging.New(stderr, f.logLevel, f.logFormat, "")
	if err != nil {
		return usageErr("%v", err)
	}
	cfg.Logger = logging.NewSlog(log)
	sec, err := f.kv.kafka.security()
	if err != nil {
		return err
	}
	var brokers []string
	for _, b := range strings.Split(f.kv.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	h, err := kvworker.New(kvworker.Config{Brokers: brokers, StoreDir: f.kv.store, Security: sec, Logger: log})
	if err != nil {
		return usageErr("%v", err)
	}
	if err := kvworker.RunWorker(ctx, cfg, h); err != nil {
		if errors.Is(err, worker.ErrConfig) || errors.Is(err, client.ErrInvalid) {
			return usageErr("%v", err)
		}
		return err
	}
	return nil
}
