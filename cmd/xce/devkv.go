package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/client"
	"github.com/xce/xce/internal/backoff"
	"github.com/xce/xce/internal/localcluster"
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
func setupDevKV(ctx context.Context, brokers string, cl *client.Client) error {
	tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := kvworker.EnsureTopics(tctx, kvworker.Config{Brokers: []string{brokers}, StoreDir: "-"}, devKVTasks); err != nil {
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
// retried: the generator is a convenience, not a part under test.
func runDevInput(ctx context.Context, brokers string, rate int) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(kvworker.DefaultInputTopic))
	if err != nil {
		return
	}
	defer cl.Close()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// A key lives in one partition, so one task counts it.
		k := i % 100
		r := &kgo.Record{Partition: int32(k % devKVTasks), Key: fmt.Appendf(nil, "k%d", k), Value: fmt.Appendf(nil, "%d", i)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil && ctx.Err() == nil {
			backoff.Sleep(ctx, time.Second)
		}
	}
}

// startDevKV sets up the Kafka workers' topics and tasks and starts the
// input generator; stop ends the generator and waits for it.
func startDevKV(ctx context.Context, cluster *localcluster.Cluster, secure bool, kafkaAddr string) (stop func(), err error) {
	var creds client.Credentials
	if secure {
		creds = cluster.Credentials()
	}
	cl, err := client.New(cluster.ClientAddrs(), client.Options{Credentials: creds})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if err := setupDevKV(ctx, kafkaAddr, cl); err != nil {
		return nil, fmt.Errorf("kafka workers: %w", err)
	}
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runDevInput(gctx, kafkaAddr, devInputRate)
	}()
	return func() { cancel(); <-done }, nil
}
