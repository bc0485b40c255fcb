// Package fence publishes every committed change downstream to Kafka, in
// Raft order and exactly once, under the producer epoch of the current
// primary: Kafka's transaction coordinator fences a deposed primary, whose
// late writes the broker rejects (docs/design.md, "Downstream writes and the
// epoch fence").
package fence

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/state"
)

// Record headers carried by every published event.
const (
	HeaderTerm  = "xce-term"
	HeaderIndex = "xce-index"
	HeaderEpoch = "xce-epoch"
	// HeaderSeq numbers the events of one Raft entry (a batch of commands)
	// from 0: (xce-index, xce-seq) names one change. A record without it
	// is the entry's only event.
	HeaderSeq = "xce-seq"
)

// Published is one event as read back from the topic.
type Published struct {
	Offset int64
	Key    string
	Term   uint64
	Index  uint64
	Seq    uint32
	Epoch  int64
	Event  state.Event
}

// ErrNotEvent is returned for a record that is not an xce event.
var ErrNotEvent = errors.New("not an xce event record")

// Encode builds the Kafka record of an event published under epoch.
func Encode(ev state.Event, epoch int16) *kgo.Record {
	v, _ := json.Marshal(ev) // an Event always marshals
	return &kgo.Record{
		Key:       []byte(cmp.Or(ev.Key, ev.TaskID)),
		Value:     v,
		Partition: 0,
		Headers: []kgo.RecordHeader{
			{Key: HeaderTerm, Value: strconv.AppendUint(nil, ev.Term, 10)},
			{Key: HeaderIndex, Value: strconv.AppendUint(nil, ev.Index, 10)},
			{Key: HeaderEpoch, Value: strconv.AppendInt(nil, int64(epoch), 10)},
			{Key: HeaderSeq, Value: strconv.AppendUint(nil, uint64(ev.Seq), 10)},
		},
	}
}

// Decode reads an event record back.
func Decode(r *kgo.Record) (Published, error) {
	p := Published{Offset: r.Offset, Key: string(r.Key)}
	var seen uint8 // one bit per required header, so a duplicate cannot stand in for a missing one
	for _, h := range r.Headers {
		var err error
		switch h.Key {
		case HeaderTerm:
			p.Term, err = strconv.ParseUint(string(h.Value), 10, 64)
			seen |= 1
		case HeaderIndex:
			p.Index, err = strconv.ParseUint(string(h.Value), 10, 64)
			seen |= 2
		case HeaderEpoch:
			p.Epoch, err = strconv.ParseInt(string(h.Value), 10, 64)
			seen |= 4
		case HeaderSeq:
			var v uint64
			v, err = strconv.ParseUint(string(h.Value), 10, 32)
			p.Seq = uint32(v)
		}
		if err != nil {
			return p, fmt.Errorf("%w: header %s: %v", ErrNotEvent, h.Key, err)
		}
	}
	if seen != 7 {
		return p, fmt.Errorf("%w: offset %d lacks the xce headers", ErrNotEvent, r.Offset)
	}
	if err := json.Unmarshal(r.Value, &p.Event); err != nil {
		return p, fmt.Errorf("%w: offset %d: %v", ErrNotEvent, r.Offset, err)
	}
	return p, nil
}

// LastPublished returns the Raft index of the last committed event on the
// topic (0 when there is none). With read_committed the end offset is the
// last stable offset and the record just before it is usually a commit
// marker, so it reads back a growing window, keeping control records
// visible to know where the window ends.
func LastPublished(ctx context.Context, brokers []string, topic string, conn ...kgo.Opt) (uint64, error) {
	adm, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DialTimeout(2 * time.Second)}, conn...)...)
	if err != nil {
		return 0, err
	}
	defer adm.Close()
	offs, err := kadm.NewClient(adm).ListCommittedOffsets(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("list end offset of %s: %w", topic, err)
	}
	o, ok := offs.Lookup(topic, 0)
	if !ok {
		return 0, fmt.Errorf("topic %s: partition 0 not found", topic)
	}
	if o.Err != nil {
		return 0, fmt.Errorf("topic %s: %w", topic, o.Err)
	}
	end := o.Offset
	for window := int64(64); ; window *= 4 {
		start := max(0, end-window)
		idx, found, err := lastEventIn(ctx, brokers, topic, start, end, conn)
		if err != nil || found || start == 0 {
			return idx, err
		}
	}
}

// lastEventIn reads [start, end) read_committed and returns the index of the
// last event record in it.
func lastEventIn(ctx context.Context, brokers []string, topic string, start, end int64, conn []kgo.Opt) (uint64, bool, error) {
	if end <= start {
		return 0, false, nil
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.DialTimeout(2 * time.Second),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(start)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	}, conn...)...)
	if err != nil {
		return 0, false, err
	}
	defer cl.Close()
	var last uint64
	found := false
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return 0, false, err
		}
		for _, fe := range fs.Errors() {
			return 0, false, fmt.Errorf("read %s: %w", topic, fe.Err)
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= end {
				done = true
				return
			}
			if r.Offset == end-1 {
				done = true
			}
			if r.Attrs.IsControl() {
				return
			}
			if p, err := Decode(r); err == nil {
				last, found = p.Index, true
			}
		})
		if done {
			return last, found, nil
		}
	}
}
