package persist

import (
	"encoding/binary"
	"errors"
	"fmt"
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
)

// commandVersion is the first byte of every encoded command. A node refuses to
// apply a version it does not know rather than guess.
const commandVersion = 1

// Limits on decoded fields, so a corrupt entry cannot make the FSM allocate
// without bound.
const (
	maxIDLen    = 256
	maxTextLen  = 4096
	maxCmdBytes = 64 << 10
)

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
}

// Encode returns the command's log representation.
func (c *Command) Encode() []byte {
	n := 2 + 5*binary.MaxVarintLen64 + len(c.ClientID) + len(c.RequestID) + len(c.Task.ID) + len(c.Task.State) + len(c.Task.PendingReason)
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
	case CmdDeleteTask:
		b = appendString(b, c.ClientID)
		b = appendString(b, c.RequestID)
		b = appendString(b, c.Task.ID)
	case CmdTrimOutbox:
		b = binary.AppendUvarint(b, c.UpTo)
	}
	return b
}

// DecodeCommand parses a log entry written by Encode. It never panics; any
// input it cannot read whole is ErrBadCommand.
func DecodeCommand(b []byte) (Command, error) {
	var c Command
	if len(b) > maxCmdBytes {
		return c, fmt.Errorf("%w: %d bytes", ErrBadCommand, len(b))
	}
	if len(b) < 2 {
		return c, fmt.Errorf("%w: too short", ErrBadCommand)
	}
	if b[0] != commandVersion {
		return c, fmt.Errorf("%w: unknown version %d", ErrBadCommand, b[0])
	}
	c.Type = CmdType(b[1])
	d := decoder{b: b[2:]}
	switch c.Type {
	case CmdNoop:
	case CmdSubmitTask:
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
	case CmdDeleteTask:
		c.ClientID = d.string(maxIDLen)
		c.RequestID = d.string(maxIDLen)
		c.Task.ID = d.string(maxIDLen)
	case CmdTrimOutbox:
		c.UpTo = d.uvarint()
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

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

type decoder struct {
	b   []byte
	err error
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
