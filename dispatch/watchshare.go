package dispatch

import (
	"slices"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/state"
)

// A generation goes to every watcher of a node at the same moment, so a
// node builds and encodes each message of a generation once and every
// watcher's stream sends those bytes, followed by the encoding of its own
// few fields (indexes, role, worker addresses): protobuf reads two encoded
// messages one after the other as one message with the fields of both.
// Watch streams are not compressed: compressing the same bytes once per
// watcher would undo the saving (docs/design.md, "Tasks, workers,
// assignments").

// sharedPart is the part of a WatchAssignmentResponse that every watcher
// of a node receives alike, with its encoding. Never changed once built.
type sharedPart struct {
	msg   *xcev1.WatchAssignmentResponse
	bytes []byte
}

func newSharedPart(m *xcev1.WatchAssignmentResponse) (*sharedPart, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return &sharedPart{msg: m, bytes: b}, nil
}

// watchCacheGenerations bounds the generations whose messages a node
// keeps: watchers that keep up ask for the last few only.
const watchCacheGenerations = 256

// watchCache holds the shared parts of recent generations' messages and of
// the latest full copy.
type watchCache struct {
	mu    sync.Mutex
	gens  map[uint64][]*sharedPart
	order []uint64 // oldest first
	// fullGen and fullVer are the generation and the assignment map's
	// version of the full copy in fullPages.
	fullGen, fullVer uint64
	fullPages        []*sharedPart
}

// delta returns the shared parts of generation c's messages, building
// them the first time. A generation's content is the same wherever it is
// read: the log made it.
func (wc *watchCache) delta(c state.GenerationChange) ([]*sharedPart, error) {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if ps, ok := wc.gens[c.Generation]; ok && ps[0].msg.Index == c.Index {
		return ps, nil
	}
	var at int64
	if !c.AppliedAt.IsZero() {
		at = c.AppliedAt.UnixNano()
	}
	ps, err := pages(len(c.Set), len(c.Removed), func(m *xcev1.WatchAssignmentResponse, set, removed [2]int) {
		m.Generation, m.Index, m.AppliedAtUnixNano = c.Generation, c.Index, at
		m.Tasks = make([]*xcev1.TaskPlacement, 0, set[1]-set[0])
		for _, p := range c.Set[set[0]:set[1]] {
			m.Tasks = append(m.Tasks, placementProto(p))
		}
		m.Removed = c.Removed[removed[0]:removed[1]]
	})
	if err != nil {
		return nil, err
	}
	if wc.gens == nil {
		wc.gens = map[uint64][]*sharedPart{}
	}
	if _, ok := wc.gens[c.Generation]; !ok {
		wc.order = append(wc.order, c.Generation)
	}
	wc.gens[c.Generation] = ps
	for len(wc.order) > watchCacheGenerations {
		delete(wc.gens, wc.order[0])
		wc.order = wc.order[1:]
	}
	return ps, nil
}

// full returns the generation and the pages of a full copy of the
// assignment at map version ver or later, built from read (the
// generation, version and map, read at one instant) when the cached copy
// is older.
func (wc *watchCache) full(ver uint64, read func() (gen, ver uint64, a map[string]state.Placement)) (uint64, []*sharedPart, error) {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if wc.fullPages != nil && wc.fullVer >= ver {
		return wc.fullGen, wc.fullPages, nil
	}
	gen, ver, a := read()
	ids := make([]string, 0, len(a))
	for id := range a {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	ps, err := pages(len(ids), 0, func(m *xcev1.WatchAssignmentResponse, set, _ [2]int) {
		m.Generation, m.Full = gen, set[0] == 0
		m.Tasks = make([]*xcev1.TaskPlacement, 0, set[1]-set[0])
		for _, id := range ids[set[0]:set[1]] {
			m.Tasks = append(m.Tasks, placementProto(a[id]))
		}
	})
	if err != nil {
		return 0, nil, err
	}
	wc.fullGen, wc.fullVer, wc.fullPages = gen, ver, ps
	return gen, ps, nil
}

// pages splits a generation of set placements and removed task ids into
// messages of at most watchPage entries, placements first, and encodes
// each: fill sets a message's fields from the half-open ranges of
// placements and removals it carries. Every message but the last says
// more; a generation with nothing in it is one empty message.
func pages(set, removed int, fill func(m *xcev1.WatchAssignmentResponse, set, removed [2]int)) ([]*sharedPart, error) {
	var ps []*sharedPart
	for start := 0; start == 0 || start < set+removed; start += watchPage {
		end := min(start+watchPage, set+removed)
		m := &xcev1.WatchAssignmentResponse{More: end < set+removed}
		fill(m, [2]int{min(start, set), min(end, set)}, [2]int{max(start, set) - set, max(end, set) - set})
		p, err := newSharedPart(m)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// sending maps a message being sent to the shared part that precedes it,
// for the codecs; an entry lives only while its stream's Send runs.
var sending sync.Map // *xcev1.WatchAssignmentResponse → *sharedPart

// sendShared sends shared followed by own on stream.
func sendShared(stream *connect.ServerStream[xcev1.WatchAssignmentResponse], shared *sharedPart, own *xcev1.WatchAssignmentResponse) error {
	sending.Store(own, shared)
	defer sending.Delete(own)
	return stream.Send(own)
}

// sharedOf returns the shared part that goes before m, if any.
func sharedOf(m any) (*sharedPart, bool) {
	w, ok := m.(*xcev1.WatchAssignmentResponse)
	if !ok {
		return nil, false
	}
	p, ok := sending.Load(w)
	if !ok {
		return nil, false
	}
	return p.(*sharedPart), true
}

// streamProto is the binary codec of the streaming procedures: a message
// with a shared part is that part's bytes and then its own.
type streamProto struct{}

func (streamProto) Name() string { return "proto" }

func (streamProto) Marshal(m any) ([]byte, error) { return streamProto{}.MarshalAppend(nil, m) }

func (streamProto) MarshalAppend(dst []byte, m any) ([]byte, error) {
	pm, err := asProto(m)
	if err != nil {
		return nil, err
	}
	if p, ok := sharedOf(m); ok {
		dst = append(dst, p.bytes...)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, pm)
}

func (streamProto) Unmarshal(b []byte, m any) error {
	pm, err := asProto(m)
	if err != nil {
		return err
	}
	return proto.Unmarshal(b, pm)
}

// streamJSON is strictJSON for the streaming procedures: a message with a
// shared part is written as the two merged.
type streamJSON struct{ strictJSON }

func (c streamJSON) Marshal(m any) ([]byte, error) { return c.strictJSON.Marshal(merged(m)) }

func (c streamJSON) MarshalAppend(dst []byte, m any) ([]byte, error) {
	return c.strictJSON.MarshalAppend(dst, merged(m))
}

// merged is m with its shared part's fields, or m.
func merged(m any) any {
	p, ok := sharedOf(m)
	if !ok {
		return m
	}
	out := proto.Clone(p.msg).(*xcev1.WatchAssignmentResponse)
	proto.Merge(out, m.(*xcev1.WatchAssignmentResponse))
	return out
}

// streamCodecs are the streaming procedures' codecs, and no compression.
func streamCodecs() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(streamProto{}),
		connect.WithCodec(streamJSON{strictJSON{"json"}}),
		connect.WithCodec(streamJSON{strictJSON{"json; charset=utf-8"}}),
		connect.WithCompressMinBytes(1 << 30),
	}
}
