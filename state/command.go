package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"
)

// CmdType names a replicated command. Values are part of the log format: never
// renumber them.
type CmdType uint8

const (
	// CmdNoop changes nothing; a new primary may append one to commit its term.
	CmdNoop CmdType = 1
	// CmdSubmitTask creates a task.
	CmdSubmitTask CmdType = 2
	// CmdDeleteTask removes a task.
	CmdDeleteTask CmdType = 3
	// CmdTrimOutbox records that every event up to an index is published
	// downstream, so the outbox can drop them.
	CmdTrimOutbox CmdType = 4
	// CmdSetAssignment moves the task assignment from one generation to the
	// next by a delta (changed placements and removed tasks).
	CmdSetAssignment CmdType = 5
	// CmdBatch carries several submit or delete commands in one log entry,
	// applied in order (see EncodeBatch). A leader writes it only when every
	// voter's binary applies it (LogFormat).
	CmdBatch CmdType = 6
	// CmdSetMember sets one member's record in the member table (see
	// MemberRecord); CmdRemoveMember removes it. A leader writes them only
	// when every voter's binary applies them (LogFormatMembers).
	CmdSetMember    CmdType = 7
	CmdRemoveMember CmdType = 8
	// CmdSetWorkerDrain drains a worker or ends its drain (see
	// EncodeDrain). A leader writes it only when every voter's binary
	// applies it (LogFormatDrain).
	CmdSetWorkerDrain CmdType = 9
	// CmdSetPlacementFrozen freezes the placement or ends its freeze (xce
	// placement freeze). A leader writes it only when every voter's
	// binary applies it (LogFormatPlacement).
	CmdSetPlacementFrozen CmdType = 10
	// CmdSetWorkerAddr sets a worker's client address or forgets it (see
	// EncodeWorkerAddr). A leader writes it only when every voter's binary
	// applies it (LogFormatWorkerAddrs).
	CmdSetWorkerAddr CmdType = 11
)

// LogFormat is the newest log format this binary applies: 1 for the
// original commands, LogFormatBatch (2) adds CmdBatch, LogFormatMembers (3)
// adds CmdSetMember and CmdRemoveMember, LogFormatDrain (4) adds
// CmdSetWorkerDrain, LogFormatPlacement (5) adds CmdSetPlacementFrozen and
// a submit's weight (a trailing field, written only for a weight above 1,
// which an older binary refuses), LogFormatWorkerAddrs (6) adds
// CmdSetWorkerAddr. Nodes report it in their status
// so a leader knows when every voter can apply a command: it writes a
// command of format n only once every voter reports at least n, since a
// voter that cannot decode an entry diverges from the others.
const (
	LogFormat            = LogFormatWorkerAddrs
	LogFormatBatch       = 2
	LogFormatMembers     = 3
	LogFormatDrain       = 4
	LogFormatPlacement   = 5
	LogFormatWorkerAddrs = 6
)

// MaxWeight bounds a task's weight (assign.MaxWeight), so that weighted
// sums cannot overflow; it fits a taskItem's 16 bits as weight − 1.
const MaxWeight = 1 << 16

// MaxBatch bounds the commands of one CmdBatch entry; MaxBatchBytes its
// encoded size.
const (
	MaxBatch      = 256
	MaxBatchBytes = 1 << 20
)

// commandVersion is the first byte of every encoded command. A node refuses to
// apply a version it does not know rather than guess.
const commandVersion = 1

// Limits on decoded fields, so a corrupt entry cannot make the FSM allocate
// without bound.
const (
	maxIDLen          = 256
	maxTextLen        = 4096
	maxCmdBytes       = 64 << 10
	maxAssignCmdBytes = MaxAssignmentBytes
	// maxCopies bounds the standbys or warm-ups of one placement.
	maxCopies = 1024
)

// MaxAssignmentBytes is the largest encoded CmdSetAssignment: an assignment
// delta may place every task at once, and 16 MiB holds several hundred
// thousand placements.
const MaxAssignmentBytes = 16 << 20

// ErrBadCommand is returned for a log entry that does not decode.
var ErrBadCommand = errors.New("malformed command")

// Command is one replicated change of the state machine.
type Command struct {
	Type      CmdType
	ClientID  string
	RequestID string
	// Task is the task to create (CmdSubmitTask); only ID is used by CmdDeleteTask.
	Task Task
	// UpTo is CmdTrimOutbox's published watermark.
	UpTo uint64
	// Assign is CmdSetAssignment's delta.
	Assign AssignmentDelta
	// Batch is CmdBatch's commands, in order: each a submit or a delete.
	Batch []Command
	// Member is CmdSetMember's record; only its ID is used by
	// CmdRemoveMember.
	Member MemberRecord
	// Worker and Drained are CmdSetWorkerDrain's: the worker, and whether
	// it is drained from now on. Worker and Addr are CmdSetWorkerAddr's:
	// the worker and its client address ("": forget it).
	Worker  string
	Drained bool
	Addr    string
	// Frozen is CmdSetPlacementFrozen's: whether the placement is frozen
	// from now on.
	Frozen bool
}

// AssignmentDelta takes the assignment from generation Base to Generation
// (Base+1): placements in Set replace (or add) those of their tasks, tasks in
// Removed lose theirs. A delta whose Base is not the current generation is
// refused, so a plan made from a stale view never lands.
type AssignmentDelta struct {
	Base       uint64
	Generation uint64
	Set        []Placement
	Removed    []string
}

// Encode returns the command's log representation.
func (c *Command) Encode() []byte {
	if c.Type == CmdBatch {
		subs := make([][]byte, len(c.Batch))
		for i := range c.Batch {
			subs[i] = c.Batch[i].Encode()
		}
		return EncodeBatch(subs)
	}
	n := 2 + 5*binary.MaxVarintLen64 + len(c.ClientID) + len(c.RequestID) + len(c.Task.ID) + len(c.Task.State) + len(c.Task.PendingReason) + len(c.Worker) + len(c.Addr)
	b := make([]byte, 0, n)
	b = append(b, commandVersion, byte(c.Type))
	switch c.Type {
	case CmdNoop:
	case CmdSubmitTask:
		b = appendString(b, c.ClientID)
		b = appendString(b, c.RequestID)
		b = appendString(b, c.Task.ID)
		var flags uint64
		if c.Task.Stateful {
			flags |= 1
		}
		b = binary.AppendUvarint(b, flags)
		b = binary.AppendUvarint(b, uint64(c.Task.StandbyReplicas))
		if c.Task.Weight > 1 {
			// Only a weight above the default is written, so that a
			// submit without one stays readable by a binary of log
			// format 4 or older.
			b = binary.AppendUvarint(b, uint64(c.Task.Weight))
		}
	case CmdDeleteTask:
		b = appendString(b, c.ClientID)
		b = appendString(b, c.RequestID)
		b = appendString(b, c.Task.ID)
	case CmdTrimOutbox:
		b = binary.AppendUvarint(b, c.UpTo)
	case CmdSetAssignment:
		d := &c.Assign
		b = binary.AppendUvarint(b, d.Base)
		b = binary.AppendUvarint(b, d.Generation)
		b = binary.AppendUvarint(b, uint64(len(d.Set)))
		for _, p := range d.Set {
			b = appendString(b, p.Task)
			b = appendString(b, p.Active)
			b = appendStrings(b, p.Standbys)
			b = appendStrings(b, p.Warmups)
		}
		b = appendStrings(b, d.Removed)
	case CmdSetMember:
		b = appendString(b, c.Member.ID)
		b = appendString(b, c.Member.PeerAddr)
		b = appendString(b, c.Member.ClientAddr)
	case CmdRemoveMember:
		b = appendString(b, c.Member.ID)
	case CmdSetWorkerDrain:
		b = appendString(b, c.Worker)
		var flags uint64
		if c.Drained {
			flags |= 1
		}
		b = binary.AppendUvarint(b, flags)
	case CmdSetPlacementFrozen:
		var flags uint64
		if c.Frozen {
			flags |= 1
		}
		b = binary.AppendUvarint(b, flags)
	case CmdSetWorkerAddr:
		b = appendString(b, c.Worker)
		b = appendString(b, c.Addr)
	}
	return b
}

// EncodeBatch returns one CmdBatch entry holding the encoded commands, in
// order; each must be a submit or a delete (as Encode wrote it). Callers
// keep to MaxBatch commands and MaxBatchBytes in all.
func EncodeBatch(cmds [][]byte) []byte {
	n := 2 + binary.MaxVarintLen64
	for _, c := range cmds {
		n += binary.MaxVarintLen64 + len(c)
	}
	b := make([]byte, 0, n)
	b = append(b, commandVersion, byte(CmdBatch))
	b = binary.AppendUvarint(b, uint64(len(cmds)))
	for _, c := range cmds {
		b = binary.AppendUvarint(b, uint64(len(c)))
		b = append(b, c...)
	}
	return b
}

// Batchable reports whether an encoded command may go in a CmdBatch: a
// submit or a delete that decodes (a bad one would fail the whole batch).
func Batchable(cmd []byte) bool {
	if len(cmd) < 2 || CmdType(cmd[1]) != CmdSubmitTask && CmdType(cmd[1]) != CmdDeleteTask {
		return false
	}
	_, err := DecodeCommand(cmd)
	return err == nil
}

// sizeLimit is the largest encoded command of type t.
func sizeLimit(t CmdType) int {
	switch t {
	case CmdSetAssignment:
		return maxAssignCmdBytes
	case CmdBatch:
		return MaxBatchBytes
	}
	return maxCmdBytes
}

// DecodeCommand parses a log entry written by Encode or EncodeBatch. It
// never panics; any input it cannot read whole is ErrBadCommand.
func DecodeCommand(b []byte) (Command, error) { return decodeCommand(b, nil) }

// decodeCommand is DecodeCommand, which puts a batch's commands in room
// (cleared) where it is large enough.
func decodeCommand(b []byte, room []Command) (Command, error) {
	var c Command
	if len(b) < 2 {
		return c, fmt.Errorf("%w: too short", ErrBadCommand)
	}
	if limit := sizeLimit(CmdType(b[1])); len(b) > limit {
		return c, fmt.Errorf("%w: %d bytes (limit %d)", ErrBadCommand, len(b), limit)
	}
	if b[0] != commandVersion {
		return c, fmt.Errorf("%w: unknown version %d", ErrBadCommand, b[0])
	}
	c.Type = CmdType(b[1])
	d := decoder{b: b[2:], room: room}
	switch c.Type {
	case CmdNoop:
	case CmdSubmitTask:
		d.submit(&c)
	case CmdDeleteTask:
		c.ClientID = d.string(maxIDLen)
		c.RequestID = d.string(maxIDLen)
		c.Task.ID = d.string(maxIDLen)
	case CmdTrimOutbox:
		c.UpTo = d.uvarint()
	case CmdSetAssignment:
		d.assignment(&c.Assign)
	case CmdBatch:
		d.batch(&c)
	case CmdSetMember:
		c.Member.ID = d.string(maxMemberIDLen)
		c.Member.PeerAddr = d.string(maxAddrLen)
		c.Member.ClientAddr = d.string(maxAddrLen)
		if d.err == nil {
			if err := c.Member.Validate(); err != nil {
				d.fail(err.Error())
			}
		}
	case CmdRemoveMember:
		c.Member.ID = d.string(maxMemberIDLen)
		if d.err == nil {
			if err := validMemberID(c.Member.ID); err != nil {
				d.fail(err.Error())
			}
		}
	case CmdSetWorkerDrain:
		d.drain(&c)
	case CmdSetPlacementFrozen:
		flags := d.uvarint()
		if d.err == nil && flags > 1 {
			d.fail("unknown freeze flags")
		}
		c.Frozen = flags&1 != 0
	case CmdSetWorkerAddr:
		d.workerAddr(&c)
	default:
		return c, fmt.Errorf("%w: unknown type %d", ErrBadCommand, b[1])
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return Command{}, d.err
	}
	return c, nil
}

// submit decodes a CmdSubmitTask's body into c.
func (d *decoder) submit(c *Command) {
	c.ClientID = d.string(maxIDLen)
	c.RequestID = d.string(maxIDLen)
	c.Task.ID = d.string(maxIDLen)
	flags := d.uvarint()
	c.Task.Stateful = flags&1 != 0
	sr := d.uvarint()
	if sr > 1<<16 {
		d.fail("standby replicas out of range")
	}
	c.Task.StandbyReplicas = uint32(sr)
	if d.err == nil && len(d.b) > 0 {
		w := d.uvarint()
		// Encode writes only weights above 1: 1 here would not
		// re-encode the same.
		if d.err == nil && (w < 2 || w > MaxWeight) {
			d.fail("weight out of range")
		}
		c.Task.Weight = uint32(w)
	}
}

// assignment decodes a CmdSetAssignment's body into a. Every task appears
// once, in Set or in Removed, with a non-empty id; so does every worker
// within one placement.
func (d *decoder) assignment(a *AssignmentDelta) {
	a.Base = d.uvarint()
	a.Generation = d.uvarint()
	if d.err == nil && (a.Base == math.MaxUint64 || a.Generation != a.Base+1) {
		d.fail("generation must follow base")
	}
	seen := map[string]bool{}
	task := func(id string) {
		switch {
		case d.err != nil:
		case id == "":
			d.fail("empty task id")
		case seen[id]:
			d.fail("task listed twice")
		default:
			seen[id] = true
		}
	}
	n := d.count()
	for i := uint64(0); i < n && d.err == nil; i++ {
		p := Placement{Task: d.string(maxIDLen), Active: d.string(maxIDLen)}
		task(p.Task)
		p.Standbys = d.strings(maxCopies)
		p.Warmups = d.strings(maxCopies)
		if d.err == nil && !distinctWorkers(p) {
			d.fail("bad worker ids in a placement")
		}
		a.Set = append(a.Set, p)
	}
	a.Removed = d.strings(1 << 24)
	for _, id := range a.Removed {
		task(id)
	}
}

// batch decodes a CmdBatch's body into c.Batch: 1 to MaxBatch submits and
// deletes, each a whole command.
func (d *decoder) batch(c *Command) {
	n := d.count()
	if d.err == nil && (n == 0 || n > MaxBatch) {
		d.fail("batch size out of range")
	}
	if d.err == nil {
		// Room for all at once: growing a slice of commands this size
		// cleared and copied it at every doubling. count has checked that
		// the body holds a byte for each.
		if uint64(cap(d.room)) >= n {
			c.Batch = d.room[:0]
			clear(d.room[:cap(d.room)])
		} else {
			c.Batch = make([]Command, 0, n)
		}
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		m := d.count()
		if d.err != nil {
			break
		}
		sub, err := DecodeCommand(d.b[:m])
		d.b = d.b[m:]
		switch {
		case err != nil:
			d.err = fmt.Errorf("batch command %d: %w", i, err)
		case sub.Type != CmdSubmitTask && sub.Type != CmdDeleteTask:
			d.fail(fmt.Sprintf("batch command %d: type %d is not a submit or a delete", i, sub.Type))
		default:
			c.Batch = append(c.Batch, sub)
		}
	}
}

// drain decodes a CmdSetWorkerDrain's body into c.
func (d *decoder) drain(c *Command) {
	c.Worker = d.string(maxIDLen)
	flags := d.uvarint()
	c.Drained = flags&1 != 0
	switch {
	case d.err != nil:
	case flags > 1:
		d.fail("unknown drain flags")
	default:
		if err := validWorkerID(c.Worker); err != nil {
			d.fail(err.Error())
		}
	}
}

// distinctWorkers reports whether a placement names each worker at most once
// and no empty worker besides an empty Active (no worker at all).
func distinctWorkers(p Placement) bool {
	seen := map[string]bool{}
	if p.Active != "" {
		seen[p.Active] = true
	}
	for _, w := range append(slices.Clone(p.Standbys), p.Warmups...) {
		if w == "" || seen[w] {
			return false
		}
		seen[w] = true
	}
	return true
}

func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

// count reads an element count; every element takes at least one byte, so a
// count above the bytes left is corrupt (and must not size an allocation).
func (d *decoder) count() uint64 {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail("count out of range")
		return 0
	}
	return n
}

func (d *decoder) strings(max uint64) []string {
	n := d.count()
	if d.err == nil && n > max {
		d.fail("too many elements")
		return nil
	}
	if n == 0 {
		return nil
	}
	// The count is bounded by the bytes left, not by what they hold:
	// grow as elements decode rather than trusting it for the allocation.
	out := make([]string, 0, min(n, 1024))
	for i := uint64(0); i < n && d.err == nil; i++ {
		out = append(out, d.string(maxIDLen))
	}
	return out
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

type decoder struct {
	b   []byte
	err error
	// room is where a batch's commands go, if large enough.
	room []Command
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrBadCommand, what)
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string(max int) string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(max) || n > uint64(len(d.b)) {
		d.fail("string length out of range")
		return ""
	}
	if !utf8.Valid(d.b[:n]) {
		// Snapshots are JSON: a non-UTF-8 id would not survive one.
		d.fail("string is not UTF-8")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
