package kvworker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.etcd.io/bbolt"

	"github.com/xce/xce/internal/backoff"
)

var (
	bucketKV   = []byte("kv")
	bucketMeta = []byte("meta")
	// keyNext is the changelog offset the store reads next: every record
	// before it (data and transaction markers) is applied.
	keyNext = []byte("changelog_next")
)

// store is one task's materialized state: a count per input key, and the
// changelog position it reflects. Values are decimal counts, the same
// bytes the changelog carries.
//
// Invariant: the counts are the state at some changelog position at or
// after next. Replaying the changelog from next to its end therefore
// yields the state at the end, since replay only rewrites keys with their
// later values. An active writes the counts of a committed transaction
// before it reads its own records back; a standby only replays.
type store struct {
	db *bbolt.DB
}

// openStore opens (or creates) the task's store under dir. bbolt locks the
// file: while a previous holder of the task in this process still closes
// it, the open waits, until ctx ends.
func openStore(ctx context.Context, dir, task string) (*store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store dir: %w", err)
	}
	path := filepath.Join(dir, task+".db")
	bo := backoff.Backoff{Min: 50 * time.Millisecond, Max: time.Second}
	for {
		db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 100 * time.Millisecond})
		if err == nil {
			err = db.Update(func(tx *bbolt.Tx) error {
				for _, b := range [][]byte{bucketKV, bucketMeta} {
					if _, err := tx.CreateBucketIfNotExists(b); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				db.Close()
				return nil, fmt.Errorf("store %s: %w", path, err)
			}
			return &store{db: db}, nil
		}
		if !errors.Is(err, bbolt.ErrTimeout) {
			return nil, fmt.Errorf("store %s: %w", path, err)
		}
		if !bo.Wait(ctx) {
			return nil, ctx.Err()
		}
	}
}

func (s *store) close() error { return s.db.Close() }

// next returns the changelog offset the store reads next (0 when new).
func (s *store) next() (int64, error) {
	var n int64
	err := s.db.View(func(tx *bbolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(keyNext); len(v) == 8 {
			n = int64(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	return n, err
}

// count returns a key's count (0 when absent).
func (s *store) count(key []byte) (uint64, error) {
	var n uint64
	err := s.db.View(func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucketKV).Get(key)
		if v == nil {
			return nil
		}
		var err error
		n, err = strconv.ParseUint(string(v), 10, 64)
		return err
	})
	return n, err
}

// kv is one store update.
type kv struct {
	key, value []byte
}

// apply writes updates and, when next >= 0, the new changelog position, in
// one bbolt transaction.
func (s *store) apply(updates []kv, next int64) error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketKV)
		for _, u := range updates {
			if err := b.Put(u.key, u.value); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		// The position never moves back: an active's read-back of its own
		// records follows the position its commits already recorded.
		if cur := meta.Get(keyNext); next < 0 || len(cur) == 8 && int64(binary.BigEndian.Uint64(cur)) >= next {
			return nil
		}
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], uint64(next))
		return meta.Put(keyNext, v[:])
	})
}

// reset empties the store: its state came from a changelog that is gone
// (it is ahead of the changelog's end, as after a broker's log was reset).
func (s *store) reset() error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		for _, b := range [][]byte{bucketKV, bucketMeta} {
			if err := tx.DeleteBucket(b); err != nil {
				return err
			}
			if _, err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		return nil
	})
}

// all returns every count (for tests and inspection).
func (s *store) all() (map[string]uint64, error) {
	out := map[string]uint64{}
	err := s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketKV).ForEach(func(k, v []byte) error {
			n, err := strconv.ParseUint(string(v), 10, 64)
			if err != nil {
				return err
			}
			out[string(k)] = n
			return nil
		})
	})
	return out, err
}
