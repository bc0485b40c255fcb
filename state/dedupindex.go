package state

import "hash/maphash"

// dedupIndex finds a remembered request id's entry in the FSM's order
// queue. It maps a hash of the (client id, request id) key to the entry's
// sequence number rather than the key itself: half the size of a map of
// string pairs, which a restart rebuilds for every entry a snapshot holds
// and which the cache then misses on less. A hash is only a candidate:
// the entry's own key is compared. The rare key whose hash another live
// key already holds is kept by key in clashes.
type dedupIndex struct {
	seed maphash.Seed
	// mask is ANDed into every hash: all ones but in tests, which make
	// keys clash at will.
	mask    uint64
	byHash  map[uint64]uint64
	clashes map[dedupKey]uint64
}

func newDedupIndex(n int) dedupIndex {
	return dedupIndex{seed: maphash.MakeSeed(), mask: ^uint64(0), byHash: make(map[uint64]uint64, n)}
}

func (x *dedupIndex) hash(k dedupKey) uint64 { return maphash.Comparable(x.seed, k) & x.mask }

// len is the number of keys indexed.
func (x *dedupIndex) len() int { return len(x.byHash) + len(x.clashes) }

// find returns the sequence number of k's entry in q.
func (x *dedupIndex) find(q *queue[dedupEntry], k dedupKey) (uint64, bool) {
	if seq, ok := x.byHash[x.hash(k)]; ok {
		if e, held := q.at(seq); held && e.Client == k.client && e.Request == k.request {
			return seq, true
		}
	}
	seq, ok := x.clashes[k]
	return seq, ok
}

// put indexes k's entry, at seq in q; it reports false, and changes
// nothing, when k is indexed already.
func (x *dedupIndex) put(q *queue[dedupEntry], k dedupKey, seq uint64) bool {
	return x.putHashed(q, k, seq, x.hash(k))
}

// putHashed is put of a key whose hash is h.
func (x *dedupIndex) putHashed(q *queue[dedupEntry], k dedupKey, seq uint64, h uint64) bool {
	old, taken := x.byHash[h]
	if taken {
		if e, held := q.at(old); held && e.Client == k.client && e.Request == k.request {
			return false
		}
	}
	if _, ok := x.clashes[k]; ok {
		return false
	}
	if !taken {
		x.byHash[h] = seq
		return true
	}
	if x.clashes == nil {
		x.clashes = make(map[dedupKey]uint64)
	}
	x.clashes[k] = seq
	return true
}

// remove forgets k, whose entry is at seq.
func (x *dedupIndex) remove(k dedupKey, seq uint64) {
	if h := x.hash(k); x.byHash[h] == seq {
		delete(x.byHash, h)
		return
	}
	delete(x.clashes, k)
}
