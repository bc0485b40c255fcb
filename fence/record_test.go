package fence_test

import (
	"errors"
	"math"
	"reflect"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/fence"
	"github.com/xce/xce/state"
)

func sampleEvents() []state.Event {
	return []state.Event{
		{Index: 1, Term: 1, Kind: state.EventTaskSubmitted, TaskID: "a",
			Task: state.Task{ID: "a", Stateful: true, StandbyReplicas: 2, CreatedIndex: 1, State: state.TaskStatePending, PendingReason: "no worker assigned"}},
		{Index: 42, Term: 7, Kind: state.EventTaskDeleted, TaskID: "tâche/ünïcode ✓",
			Task: state.Task{ID: "tâche/ünïcode ✓", CreatedIndex: 40}},
		{Index: 43, Seq: 5, Term: 7, Kind: state.EventTaskSubmitted, TaskID: "b", Task: state.Task{ID: "b", CreatedIndex: 43}},
		{Index: math.MaxUint64, Seq: math.MaxUint32, Term: math.MaxUint64, Kind: state.EventTaskSubmitted, TaskID: ""},
		{},
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, epoch := range []int16{0, 1, 7, math.MaxInt16} {
		for _, ev := range sampleEvents() {
			r := fence.Encode(ev, epoch)
			if string(r.Key) != ev.TaskID || r.Partition != 0 {
				t.Fatalf("Encode(%+v): key %q partition %d", ev, r.Key, r.Partition)
			}
			r.Offset = 99
			p, err := fence.Decode(r)
			if err != nil {
				t.Fatalf("Decode(Encode(%+v, %d)): %v", ev, epoch, err)
			}
			want := fence.Published{Offset: 99, Key: ev.TaskID, Term: ev.Term, Index: ev.Index, Seq: ev.Seq, Epoch: int64(epoch), Event: ev}
			if !reflect.DeepEqual(p, want) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", p, want)
			}
		}
	}
}

func TestDecodeHeaderOrderAndExtraHeaders(t *testing.T) {
	ev := sampleEvents()[1]
	r := fence.Encode(ev, 3)
	h := r.Headers
	r.Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte("x")}, h[2], h[0], {Key: "other", Value: nil}, h[1]}
	p, err := fence.Decode(r)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Event, ev) || p.Epoch != 3 || p.Index != 42 || p.Term != 7 {
		t.Fatalf("decoded %+v", p)
	}
}

// TestDecodeWithoutSeq: a record without xce-seq (written before batches
// existed) is its entry's only event.
func TestDecodeWithoutSeq(t *testing.T) {
	r := fence.Encode(sampleEvents()[0], 2)
	var hs []kgo.RecordHeader
	for _, h := range r.Headers {
		if h.Key != fence.HeaderSeq {
			hs = append(hs, h)
		}
	}
	if len(hs) != len(r.Headers)-1 {
		t.Fatalf("Encode wrote no %s header: %+v", fence.HeaderSeq, r.Headers)
	}
	r.Headers = hs
	p, err := fence.Decode(r)
	if err != nil || p.Seq != 0 || p.Index != 1 {
		t.Fatalf("Decode without seq: %+v, %v", p, err)
	}
}

func TestDecodeRejectsNonEvents(t *testing.T) {
	good := func() *kgo.Record { return fence.Encode(sampleEvents()[0], 5) }
	without := func(key string) *kgo.Record {
		r := good()
		var hs []kgo.RecordHeader
		for _, h := range r.Headers {
			if h.Key != key {
				hs = append(hs, h)
			}
		}
		r.Headers = hs
		return r
	}
	with := func(key, value string) *kgo.Record {
		r := good()
		for i := range r.Headers {
			if r.Headers[i].Key == key {
				r.Headers[i].Value = []byte(value)
			}
		}
		return r
	}
	withValue := func(v string) *kgo.Record {
		r := good()
		r.Value = []byte(v)
		return r
	}
	dup := good()
	dup.Headers = append(dup.Headers[:2:2], dup.Headers[0]) // term twice, no epoch

	cases := map[string]*kgo.Record{
		"no headers":        {Value: good().Value},
		"no term":           without(fence.HeaderTerm),
		"no index":          without(fence.HeaderIndex),
		"no epoch":          without(fence.HeaderEpoch),
		"duplicate header":  dup,
		"term not a number": with(fence.HeaderTerm, "seven"),
		"term negative":     with(fence.HeaderTerm, "-1"),
		"term empty":        with(fence.HeaderTerm, ""),
		"term overflow":     with(fence.HeaderTerm, "18446744073709551616"),
		"index hex":         with(fence.HeaderIndex, "0x10"),
		"index spaces":      with(fence.HeaderIndex, " 1"),
		"index float":       with(fence.HeaderIndex, "1.0"),
		"epoch not number":  with(fence.HeaderEpoch, "e"),
		"epoch overflow":    with(fence.HeaderEpoch, "9223372036854775808"),
		"seq not number":    with(fence.HeaderSeq, "first"),
		"seq negative":      with(fence.HeaderSeq, "-1"),
		"seq overflow":      with(fence.HeaderSeq, "4294967296"),
		"value empty":       withValue(""),
		"value not json":    withValue("{"),
		"value wrong type":  withValue(`{"index":"one"}`),
		"value array":       withValue(`[1,2]`),
		"value string":      withValue(`"event"`),
		"value number":      withValue(`12`),
		"value trailing":    withValue(`{} x`),
		"plain record":      {Key: []byte("k"), Value: []byte("v")},
	}
	for name, r := range cases {
		t.Run(name, func(t *testing.T) {
			if name == "duplicate header" {
			}
			r.Offset = 17
			_, err := fence.Decode(r)
			if !errors.Is(err, fence.ErrNotEvent) {
				t.Fatalf("Decode: %v, want ErrNotEvent", err)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	for _, ev := range sampleEvents() {
		r := fence.Encode(ev, 3)
		f.Add(r.Key, string(r.Headers[0].Value), string(r.Headers[1].Value), string(r.Headers[2].Value), r.Value, uint8(0))
	}
	f.Add([]byte("k"), "1", "2", "3", []byte(`{"index":2,"term":1,"task":{"id":"\u0000"}}`), uint8(3))
	f.Add([]byte(nil), "", "-0", "+1", []byte(nil), uint8(255))
	f.Add([]byte("k"), "18446744073709551615", "00000000000000000000001", "-32769", []byte(`null`), uint8(9))
	// Term twice, no epoch (the known bug).
	f.Add([]byte("k"), "1", "2", "3", []byte(`{}`), uint8(4|8))
	f.Fuzz(func(t *testing.T, key []byte, term, index, epoch string, value []byte, shape uint8) {
		hs := []kgo.RecordHeader{
			{Key: fence.HeaderTerm, Value: []byte(term)},
			{Key: fence.HeaderIndex, Value: []byte(index)},
			{Key: fence.HeaderEpoch, Value: []byte(epoch)},
		}
		// shape drops, duplicates and reorders headers.
		var used []kgo.RecordHeader
		for i, h := range hs {
			if shape&(1<<i) == 0 {
				used = append(used, h)
			}
			if shape&(8<<i) != 0 {
				used = append(used, h)
			}
		}
		if shape&64 != 0 {
			used = append(used, kgo.RecordHeader{Key: "x-other", Value: value})
		}
		if shape&128 != 0 && len(used) > 1 {
			used[0], used[len(used)-1] = used[len(used)-1], used[0]
		}
		r := &kgo.Record{Key: key, Value: value, Headers: used, Offset: 5}
		p, err := fence.Decode(r)
		if err != nil {
			if !errors.Is(err, fence.ErrNotEvent) {
				t.Fatalf("Decode error %v does not wrap ErrNotEvent", err)
			}
			return
		}
		// Accepted: the numbers are what the headers say (the last of a
		// duplicate counts), and the record encodes back to an equal one.
		if p.Key != string(key) || p.Offset != 5 {
			t.Fatalf("decoded %+v from key %q", p, key)
		}
		var lastTerm, lastIndex, lastEpoch string
		var seen [3]bool
		for _, h := range used {
			switch h.Key {
			case fence.HeaderTerm:
				lastTerm, seen[0] = string(h.Value), true
			case fence.HeaderIndex:
				lastIndex, seen[1] = string(h.Value), true
			case fence.HeaderEpoch:
				lastEpoch, seen[2] = string(h.Value), true
			}
		}
		if seen != [3]bool{true, true, true} {
			t.Fatalf("Decode accepted a record lacking an xce header (present: %v)", seen)
		}
		if v, err := strconv.ParseUint(lastTerm, 10, 64); err != nil || v != p.Term {
			t.Fatalf("term %d from %q", p.Term, lastTerm)
		}
		if v, err := strconv.ParseUint(lastIndex, 10, 64); err != nil || v != p.Index {
			t.Fatalf("index %d from %q", p.Index, lastIndex)
		}
		if v, err := strconv.ParseInt(lastEpoch, 10, 64); err != nil || v != p.Epoch {
			t.Fatalf("epoch %d from %q", p.Epoch, lastEpoch)
		}
		if p.Epoch >= math.MinInt16 && p.Epoch <= math.MaxInt16 {
			back, err := fence.Decode(fence.Encode(p.Event, int16(p.Epoch)))
			if err != nil || !reflect.DeepEqual(back.Event, p.Event) {
				t.Fatalf("re-encoding %+v: %+v, %v", p.Event, back, err)
			}
		}
	})
}
