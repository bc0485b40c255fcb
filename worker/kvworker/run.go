package kvworker

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/worker"
)

// RunWorker runs a worker whose copies h holds, until ctx ends and the
// worker has handed its actives over: the worker library's registration,
// heartbeats and lease around h. While it runs, the lags of the stores no
// copy holds are kept fresh (Handler.Lags).
func RunWorker(ctx context.Context, cfg worker.Config, h *Handler) error {
	w, err := worker.New(cfg, h)
	if err != nil {
		return err
	}
	lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	// The stores' lags go with the first heartbeat, so that the assignor
	// plans for this worker knowing where its state is.
	h.scanStores(ctx)
	h.firstLags(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.watchLags(lctx)
	}()
	defer func() { stop(); <-done }()
	return w.Run(ctx)
}

// EnsureTopics creates the input, changelog and output topics with
// partitions partitions each where they do not exist yet (one task per
// input partition; the changelog needs one partition per task). A topic
// that exists is left as it is.
func EnsureTopics(ctx context.Context, cfg Config, partitions int32) error {
	h, err := New(cfg)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(h.cfg.Brokers...)}, h.conn...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, t := range []struct {
		name    string
		configs map[string]*string
	}{
		{h.cfg.InputTopic, nil},
		// The changelog needs only each key's last value.
		{h.cfg.ChangelogTopic, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}},
		{h.cfg.OutputTopic, nil},
	} {
		resp, err := adm.CreateTopic(ctx, partitions, -1, t.configs, t.name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", t.name, err)
		}
	}
	return nil
}
