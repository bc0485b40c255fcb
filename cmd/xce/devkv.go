package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/client"
	"github.com/xce/xce/internal/backoff"
	"github.com/xce/xce/internal/kafkaopts"
	"github.com/xce/xce/logging"
	"github.com/xce/xce/worker/kvworker"
)

// With Kafka on, `xce dev` runs Kafka-backed workers: devKVTasks tasks
// input-0 … input-<n-1>, one per partition of the input topic, each
// stateful with one standby, fed by an input generator at devInputRate
// records/s.
const (
	devKVTasks   = 6
	devInputRate = 20
)

// setupDevKV creates the worker topics and submits the input tasks; a task
// that exists already (a dev directory run before) is kept.
func setupDevKV(ctx context.Context, brokers string, sec kafkaopts.Security, cl *client.Client) error {
	tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := kvworker.EnsureTopics(tctx, kvworker.Config{Brokers: []string{brokers}, StoreDir: "-", Security: sec}, devKVTasks); err != nil {
		return err
	}
	for p := range devKVTasks {
		id := fmt.Sprintf("%s%d", kvworker.TaskPrefix, p)
		_, err := cl.Submit(tctx, client.Task{ID: id, Stateful: true, StandbyReplicas: 1})
		if err != nil && !errors.Is(err, client.ErrAlreadyExists) {
			return fmt.Errorf("submit %s: %w", id, err)
		}
	}
	return nil
}

// runDevInput produces rate records/s to the input topic, round robin over
// its partitions with keys k0 … k99, until ctx ends. Kafka errors are
// logged to logPath and retried: the generator is a convenience, not a
// part under test. It fails only when it cannot make its client.
func runDevInput(ctx context.Context, logPath, brokers string, sec kafkaopts.Security, rate int) error {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	log, err := logging.New(f, "info", "json", "")
	if err != nil {
		return err
	}
	conn, err := sec.Opts(log)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(kvworker.DefaultInputTopic)}, conn...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	log.Info().Str("brokers", brokers).Str("topic", kvworker.DefaultInputTopic).Int("rate", rate).Msg("producing the input")
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		// A key lives in one partition, so one task counts it.
		k := i % 100
		r := &kgo.Record{Partition: int32(k % devKVTasks), Key: fmt.Appendf(nil, "k%d", k), Value: fmt.Appendf(nil, "%d", i)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Msg("producing failed; trying again in a second")
			backoff.Sleep(ctx, time.Second)
		}
	}
}

// startKV sets up the Kafka workers' topics and tasks and starts the input
// generator under the supervisor, through the broker's TLS and SASL with
// --tls.
func (d *devRun) startKV(ctx context.Context) error {
	cl, err := client.New(d.cluster.ClientAddrs(), client.Options{Credentials: d.cluster.Credentials()})
	if err != nil {
		return err
	}
	defer cl.Close()
	sec := d.cluster.KafkaSecurity()
	if err := setupDevKV(ctx, d.kafkaAddr, sec, cl); err != nil {
		return fmt.Errorf("kafka workers: %w", err)
	}
	logPath := d.logPath("input")
	return d.sup.add(stageInput, "input", logPath, &goChild{run: func(ctx context.Context) error {
		return runDevInput(ctx, logPath, d.kafkaAddr, sec, devInputRate)
	}})
}
