package state

import (
	"errors"
	"fmt"
	"maps"
	"unicode/utf8"
)

// Worker client addresses: where each worker serves its clients, as it
// registered with the PRIMARY, kept in the log so that every node (a
// STANDBY too) hands them to watchers (docs/design.md, "Tasks, workers,
// assignments"). The PRIMARY writes a worker's address when it registers
// with a new one and forgets it when the worker has gone for good.

// MaxWorkerAddrs bounds the workers with an address: the map must not
// grow without bound.
const MaxWorkerAddrs = 100_000

// MaxWorkerAddrLen bounds one address in bytes, as the worker API does.
const MaxWorkerAddrLen = 256

// ErrBadWorkerAddr is returned by EncodeWorkerAddr for an invalid worker
// id or address.
var ErrBadWorkerAddr = errors.New("invalid worker address")

// validWorkerAddr reports whether a is an address a worker may have
// registered: at most MaxWorkerAddrLen bytes of UTF-8 ("" forgets it).
func validWorkerAddr(a string) error {
	if len(a) > MaxWorkerAddrLen {
		return fmt.Errorf("worker address: longer than %d bytes", MaxWorkerAddrLen)
	}
	if !utf8.ValidString(a) {
		return errors.New("worker address: not UTF-8")
	}
	return nil
}

// EncodeWorkerAddr returns the CmdSetWorkerAddr entry that sets worker
// id's client address, or forgets it (addr "").
func EncodeWorkerAddr(id, addr string) ([]byte, error) {
	if err := validWorkerID(id); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadWorkerAddr, err)
	}
	if err := validWorkerAddr(addr); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadWorkerAddr, err)
	}
	return (&Command{Type: CmdSetWorkerAddr, Worker: id, Addr: addr}).Encode(), nil
}

// workerAddr decodes a CmdSetWorkerAddr's body into c.
func (d *decoder) workerAddr(c *Command) {
	c.Worker = d.string(maxIDLen)
	c.Addr = d.string(MaxWorkerAddrLen)
	if d.err != nil {
		return
	}
	if err := validWorkerID(c.Worker); err != nil {
		d.fail(err.Error())
	}
}

// setWorkerAddrLocked sets or forgets worker id's address. A new worker
// beyond MaxWorkerAddrs is CodeInvalid and changes nothing; the same
// address twice is not an error and changes nothing.
func (f *FSM) setWorkerAddrLocked(index uint64, id, addr string) Result {
	old, had := f.workerAddrs[id]
	switch {
	case addr == "" && !had, had && old == addr:
		return Result{Index: index}
	case addr == "":
		delete(f.workerAddrs, id)
	case !had && len(f.workerAddrs) >= MaxWorkerAddrs:
		return Result{Index: index, Code: CodeInvalid, Err: fmt.Sprintf("%d workers have an address already (the most there may be)", MaxWorkerAddrs)}
	default:
		f.workerAddrs[id] = addr
	}
	f.workerAddrVer++
	return Result{Index: index}
}

// WorkerAddrs returns a copy of the workers' client addresses by worker
// id, and the version of the map (see WorkerAddrVersion).
func (f *FSM) WorkerAddrs() (map[string]string, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return maps.Clone(f.workerAddrs), f.workerAddrVer
}

// WorkerAddrVersion counts the changes of the workers' addresses, so that
// readers copy them only when they changed.
func (f *FSM) WorkerAddrVersion() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.workerAddrVer
}

// restoreWorkerAddrs checks a snapshot's worker addresses: valid ids with
// a non-empty valid address, at most MaxWorkerAddrs.
func restoreWorkerAddrs(addrs map[string]string) (map[string]string, error) {
	if len(addrs) > MaxWorkerAddrs {
		return nil, fmt.Errorf("%w: %d worker addresses (at most %d)", ErrBadSnapshot, len(addrs), MaxWorkerAddrs)
	}
	out := make(map[string]string, len(addrs))
	for id, a := range addrs {
		if err := validWorkerID(id); err != nil {
			return nil, fmt.Errorf("%w: worker addresses: %v", ErrBadSnapshot, err)
		}
		if a == "" {
			return nil, fmt.Errorf("%w: worker %q has an empty address", ErrBadSnapshot, id)
		}
		if err := validWorkerAddr(a); err != nil {
			return nil, fmt.Errorf("%w: worker %q: %v", ErrBadSnapshot, id, err)
		}
		out[id] = a
	}
	return out, nil
}
