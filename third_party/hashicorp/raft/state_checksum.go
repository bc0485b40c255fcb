package raft

import (
	"encoding/binary"
	"hash/crc32"
	"hash/crc64"
	"io"
)

// crc32Pair is the checksum of the state files this store writes: the
// file's CRC-32C followed by its CRC-32 (IEEE), 8 bytes big-endian. Both
// are computed by the processor's own instructions where it has them,
// several times faster than the table-driven CRC-64 older snapshots carry,
// and together they check as many bits.
type crc32Pair struct{ c, ieee uint32 }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (p *crc32Pair) Write(b []byte) (int, error) {
	p.c = crc32.Update(p.c, castagnoli, b)
	p.ieee = crc32.Update(p.ieee, crc32.IEEETable, b)
	return len(b), nil
}

func (p *crc32Pair) Sum(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, p.c)
	return binary.BigEndian.AppendUint32(b, p.ieee)
}

// stateSum is a checksum of a state file as it is written to it.
type stateSum interface {
	io.Writer
	Sum([]byte) []byte
}

// stateCheck returns the checksum that checks the state file of the
// snapshot with meta m, and the sum it must come to: the CRC-32 pair where
// m has one, the CRC-64 of older snapshots otherwise.
func stateCheck(m *fileSnapshotMeta) (h stateSum, want []byte) {
	if len(m.CRC32) > 0 {
		return &crc32Pair{}, m.CRC32
	}
	return crc64.New(crc64.MakeTable(crc64.ECMA)), m.CRC
}
