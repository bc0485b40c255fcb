// Package backup is xce's backup file: a header naming the cluster, the
// index and term a snapshot was taken at, and the size and SHA-256 of its
// data, followed by the data, which is the state machine's own snapshot
// (package state). A file is verified whole, header and checksum, before
// any of it is used; restore turns one into a new cluster's data dirs
// (docs/design.md, "Backup and restore").
package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// The file's layout, all integers big-endian:
//
//	magic       8 bytes, "XCEBKUP\n"
//	version     uint32
//	cluster id  uint16 length, then that many bytes
//	index       uint64
//	term        uint64
//	size        uint64, of the data
//	sha256      32 bytes, of the data
//	crc32c      uint32, of every header byte before it
//	data        size bytes
//
// The header's own checksum catches a damaged index or term, which the
// data's checksum does not cover.
const (
	Magic = "XCEBKUP\n"
	// Version is the format this binary writes and the newest it reads.
	Version = 1
	// MaxClusterID bounds the cluster id a header may carry.
	MaxClusterID = 1024
	// fixedLen is the header without the cluster id.
	fixedLen = len(Magic) + 4 + 2 + 8 + 8 + 8 + sha256.Size + 4
)

// Errors of reading a file; every one is an ErrInvalid too.
var (
	ErrInvalid   = errors.New("not a valid backup file")
	ErrNotBackup = fmt.Errorf("%w: not an xce backup (bad magic)", ErrInvalid)
	ErrVersion   = fmt.Errorf("%w: unsupported format version", ErrInvalid)
	ErrTruncated = fmt.Errorf("%w: truncated", ErrInvalid)
	ErrCorrupt   = fmt.Errorf("%w: corrupt", ErrInvalid)
	ErrChecksum  = fmt.Errorf("%w: data checksum mismatch", ErrInvalid)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header describes a backup's data.
type Header struct {
	Version   uint32
	ClusterID string
	// Index and Term are the log position the snapshot holds the state
	// of: every entry up to Index, in a term no later than Term.
	Index, Term uint64
	Size        uint64
	SHA256      [sha256.Size]byte
}

// Len is the header's length in the file.
func (h Header) Len() int64 { return int64(fixedLen + len(h.ClusterID)) }

// Sum is the data checksum in hex.
func (h Header) Sum() string { return hex.EncodeToString(h.SHA256[:]) }

// Encode returns the header's bytes.
func (h Header) Encode() ([]byte, error) {
	if len(h.ClusterID) > MaxClusterID {
		return nil, fmt.Errorf("cluster id of %d bytes: at most %d", len(h.ClusterID), MaxClusterID)
	}
	b := make([]byte, 0, h.Len())
	b = append(b, Magic...)
	b = binary.BigEndian.AppendUint32(b, h.Version)
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.ClusterID)))
	b = append(b, h.ClusterID...)
	b = binary.BigEndian.AppendUint64(b, h.Index)
	b = binary.BigEndian.AppendUint64(b, h.Term)
	b = binary.BigEndian.AppendUint64(b, h.Size)
	b = append(b, h.SHA256[:]...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// ReadHeader reads and checks a header from r: magic, version, length and
// its own checksum. The data is not read.
func ReadHeader(r io.Reader) (Header, error) {
	var h Header
	head := make([]byte, len(Magic)+4+2)
	if n, err := io.ReadFull(r, head); err != nil {
		if n >= len(Magic) && string(head[:len(Magic)]) != Magic {
			return h, ErrNotBackup
		}
		return h, fmt.Errorf("%w: header: %d of at least %d bytes", ErrTruncated, n, fixedLen)
	}
	if string(head[:len(Magic)]) != Magic {
		return h, ErrNotBackup
	}
	h.Version = binary.BigEndian.Uint32(head[len(Magic):])
	if h.Version != Version {
		return h, fmt.Errorf("%w: version %d, this binary reads version %d", ErrVersion, h.Version, Version)
	}
	idLen := int(binary.BigEndian.Uint16(head[len(Magic)+4:]))
	if idLen > MaxClusterID {
		return h, fmt.Errorf("%w: header: cluster id of %d bytes, at most %d", ErrCorrupt, idLen, MaxClusterID)
	}
	rest := make([]byte, fixedLen-len(head)+idLen)
	if n, err := io.ReadFull(r, rest); err != nil {
		return h, fmt.Errorf("%w: header: %d of %d bytes", ErrTruncated, len(head)+n, len(head)+len(rest))
	}
	all := append(head, rest...)
	body, crc := all[:len(all)-4], binary.BigEndian.Uint32(all[len(all)-4:])
	if crc32.Checksum(body, castagnoli) != crc {
		return h, fmt.Errorf("%w: header checksum mismatch", ErrCorrupt)
	}
	p := rest
	h.ClusterID, p = string(p[:idLen]), p[idLen:]
	h.Index, p = binary.BigEndian.Uint64(p), p[8:]
	h.Term, p = binary.BigEndian.Uint64(p), p[8:]
	h.Size, p = binary.BigEndian.Uint64(p), p[8:]
	copy(h.SHA256[:], p)
	return h, nil
}

// Verify reads a whole backup of size bytes from r: the header, then the
// data against the header's size and checksum. It returns the header and
// an error for the first problem found; a header read without error is
// returned even when the data fails.
func Verify(r io.ReaderAt, size int64) (Header, error) {
	h, err := ReadHeader(io.NewSectionReader(r, 0, size))
	if err != nil {
		return h, err
	}
	have := size - h.Len()
	switch {
	case h.Size > uint64(1)<<62 || have < int64(h.Size):
		return h, fmt.Errorf("%w: data: %d of %d bytes", ErrTruncated, have, h.Size)
	case have > int64(h.Size):
		return h, fmt.Errorf("%w: %d bytes after the data", ErrCorrupt, have-int64(h.Size))
	}
	sum := sha256.New()
	if _, err := io.Copy(sum, io.NewSectionReader(r, h.Len(), int64(h.Size))); err != nil {
		return h, fmt.Errorf("read data: %w", err)
	}
	if !bytes.Equal(sum.Sum(nil), h.SHA256[:]) {
		return h, fmt.Errorf("%w: sha256 %x, header says %s", ErrChecksum, sum.Sum(nil), h.Sum())
	}
	return h, nil
}

// Marshal returns a whole backup file holding data.
func Marshal(clusterID string, index, term uint64, data []byte) ([]byte, error) {
	h := Header{Version: Version, ClusterID: clusterID, Index: index, Term: term, Size: uint64(len(data)), SHA256: sha256.Sum256(data)}
	b, err := h.Encode()
	if err != nil {
		return nil, err
	}
	return append(b, data...), nil
}

// File is a verified backup file open for reading.
type File struct {
	Header Header
	f      *os.File
}

// Open opens the backup at path and verifies it whole (Verify).
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	h, err := Verify(f, fi.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &File{Header: h, f: f}, nil
}

// Data returns a reader of the data, from its start.
func (f *File) Data() io.Reader {
	return io.NewSectionReader(f.f, f.Header.Len(), int64(f.Header.Size))
}

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }
