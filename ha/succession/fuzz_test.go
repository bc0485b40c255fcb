package succession

import (
	"bytes"
	"encoding/binary"
	"hash/fnv"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// fuzzMembers are the member IDs fuzz ops name, awkward ones included.
var fuzzMembers = []MemberID{"a", "b", "c", "node-1", "x/y", "sp ace", "%41", ""}

// Fuzz ops: each is one byte, then offset and timestamp as varints, then the
// op's arguments.
const (
	opReg           = iota // member byte
	opDereg                // member byte
	opLease                // member byte, deadline varint
	opRelease              //
	opOtherRole            // member byte: a registration for role "r/x"
	opRaw                  // key, value (length-prefixed; length 0xff.. = nil)
	opBadRegValue          // member byte, value
	opBadLeaseValue        // value
	numOps
)

type fuzzWriter struct{ b []byte }

func (w *fuzzWriter) op(op byte, off, ts int64) *fuzzWriter {
	w.b = append(w.b, op)
	w.b = binary.AppendVarint(w.b, off)
	w.b = binary.AppendVarint(w.b, ts)
	return w
}
func (w *fuzzWriter) member(i byte) *fuzzWriter { w.b = append(w.b, i); return w }
func (w *fuzzWriter) int(v int64) *fuzzWriter   { w.b = binary.AppendVarint(w.b, v); return w }
func (w *fuzzWriter) bytes(v []byte) *fuzzWriter {
	if v == nil {
		w.b = binary.AppendVarint(w.b, -1)
		return w
	}
	w.b = binary.AppendVarint(w.b, int64(len(v)))
	w.b = append(w.b, v...)
	return w
}

type fuzzReader struct{ b []byte }

func (r *fuzzReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *fuzzReader) int() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.b = nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *fuzzReader) member() MemberID { return fuzzMembers[int(r.byte())%len(fuzzMembers)] }

func (r *fuzzReader) bytes() []byte {
	n := r.int()
	if n < 0 {
		return nil
	}
	n = min(n, int64(len(r.b)))
	v := bytes.Clone(r.b[:n])
	r.b = r.b[n:]
	if v == nil {
		v = []byte{}
	}
	return v
}

// decodeFuzzRecords turns fuzz input into records of the coordination topic,
// mostly well-formed (so the fuzzer reaches interesting states quickly) and
// some raw.
func decodeFuzzRecords(data []byte) []Record {
	r := &fuzzReader{b: data}
	var recs []Record
	for len(r.b) > 0 && len(recs) < 64 {
		op := r.byte() % numOps
		rc := Record{Offset: r.int(), TimestampMillis: r.int()}
		switch op {
		case opReg:
			rc.Key, rc.Value = RegistrationRecord("r", r.member())
		case opDereg:
			rc.Key = DeregistrationKey("r", r.member())
		case opLease:
			m := r.member()
			rc.Key, rc.Value = LeaseRecord("r", Lease{Holder: m, DeadlineMillis: r.int()})
		case opRelease:
			rc.Key = LeaseKey("r")
		case opOtherRole:
			rc.Key, rc.Value = RegistrationRecord("r/x", r.member())
		case opRaw:
			rc.Key, rc.Value = r.bytes(), r.bytes()
		case opBadRegValue:
			rc.Key, rc.Value = RegistrationKey("r", r.member()), r.bytes()
		case opBadLeaseValue:
			rc.Key, rc.Value = LeaseKey("r"), r.bytes()
		}
		recs = append(recs, rc)
	}
	return recs
}

func FuzzFoldRecords(f *testing.F) {
	// A failover: a, b, c register; a leases and renews, dies; b takes over; a
	// recovers at the tail.
	w := &fuzzWriter{}
	w.op(opReg, 0, 1000).member(0)
	w.op(opReg, 1, 1001).member(1)
	w.op(opReg, 2, 1002).member(2)
	w.op(opLease, 3, 1000).member(0).int(2000)
	w.op(opLease, 4, 1300).member(0).int(2300)
	w.op(opLease, 5, 2400).member(1).int(3400)
	w.op(opReg, 6, 3000).member(0)
	f.Add(w.b)
	// The same history delivered out of order, with a deregistration, a
	// release, another role's records and unusable values.
	w = &fuzzWriter{}
	w.op(opLease, 5, 2400).member(1).int(3400)
	w.op(opReg, 2, 1002).member(2)
	w.op(opOtherRole, 7, 3100).member(1)
	w.op(opReg, 0, 1000).member(0)
	w.op(opDereg, 8, 3200).member(2)
	w.op(opBadRegValue, 9, 3300).member(1).bytes([]byte("reg v1 r c"))
	w.op(opRelease, 10, 3400)
	w.op(opBadLeaseValue, 11, 3500).bytes([]byte("lease v1 r a 12x"))
	w.op(opReg, 1, 1001).member(1)
	f.Add(w.b)
	// Raw records exactly as the transport would consume them, including
	// escaped IDs, a duplicate offset and a nil key.
	w = &fuzzWriter{}
	for i, m := range fuzzMembers {
		k, v := RegistrationRecord("r", m)
		w.op(opRaw, int64(i), int64(100*i)).bytes(k).bytes(v)
	}
	k, v := LeaseRecord("r", Lease{Holder: "x/y", DeadlineMillis: 1 << 40})
	w.op(opRaw, 3, 0).bytes(k).bytes(v)
	w.op(opRaw, 20, 0).bytes(nil).bytes([]byte("v"))
	w.op(opRaw, 21, 0).bytes([]byte("reg/r/%2f")).bytes(nil)
	f.Add(w.b)
	// Offsets one partition never repeats, repeated.
	w = &fuzzWriter{}
	for i := range 5 {
		w.op(opReg, 4, 0).member(byte(i))
	}
	w.op(opLease, 4, 0).member(2).int(10)
	w.op(opRelease, 4, 0)
	f.Add(w.b)
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		recs := decodeFuzzRecords(data)
		input := slices.Clone(recs)
		s := FoldRecords("r", recs)
		if !reflect.DeepEqual(recs, input) {
			t.Fatal("FoldRecords modified its input")
		}
		checkRoster(t, s, recs)
		checkRanks(t, s)

		// Any order of delivery folds to the same state.
		h := fnv.New64a()
		h.Write(data)
		rng := rand.New(rand.NewPCG(h.Sum64(), 0))
		for i := range 3 {
			perm := slices.Clone(recs)
			switch i {
			case 0:
				slices.SortFunc(perm, compareRecords)
			case 1:
				slices.Reverse(perm)
			case 2:
				rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
			}
			if got := FoldRecords("r", perm); !reflect.DeepEqual(got, s) {
				t.Fatalf("permutation %d folds to\n%s\nnot\n%s", i, formatState(got), formatState(s))
			}
		}
		// So does the partition after the log cleaner has run.
		for _, drop := range []bool{false, true} {
			if got := FoldRecords("r", compact(recs, drop)); !reflect.DeepEqual(got, s) {
				t.Fatalf("compacted (drop tombstones %v) folds to\n%s\nnot\n%s", drop, formatState(got), formatState(s))
			}
		}

		// Evaluate never panics and its waits end exactly when the answer changes.
		c := LeaseConfig{LeaseMillis: 1000, RenewMillis: 300, StaggerMillis: int64(len(data) % 200)}
		for _, m := range fuzzMembers {
			for _, now := range []int64{0, 1000, 2500, 1 << 40} {
				d := Evaluate(s, m, now, c)
				if d.Action == Wait {
					if Evaluate(s, m, d.WaitUntilMillis-1, c) != d || Evaluate(s, m, d.WaitUntilMillis, c).Action != Challenge {
						t.Fatalf("%s at %d: %v does not end exactly at its instant\n%s", m, now, d, formatState(s))
					}
				}
			}
		}
	})
}

// checkRoster asserts the roster is sorted by offset with unique, non-empty
// members, each at its latest registration.
func checkRoster(t *testing.T, s RoleState, recs []Record) {
	t.Helper()
	seen := make(map[MemberID]bool)
	for i, r := range s.Roster {
		if r.Member == "" || seen[r.Member] {
			t.Fatalf("roster entry %d: empty or duplicate member %q\n%s", i, r.Member, formatState(s))
		}
		seen[r.Member] = true
		if i > 0 && compareRegistrations(s.Roster[i-1], r) >= 0 {
			t.Fatalf("roster out of offset order at %d\n%s", i, formatState(s))
		}
		key, value := RegistrationRecord("r", r.Member)
		var latest *Record
		for j := range recs {
			if bytes.Equal(recs[j].Key, key) && (latest == nil || compareRecords(*latest, recs[j]) < 0) {
				latest = &recs[j]
			}
		}
		if latest == nil || !bytes.Equal(latest.Value, value) ||
			latest.Offset != r.Offset || latest.TimestampMillis != r.AtMillis {
			t.Fatalf("%+v is not %s's latest registration %+v", r, r.Member, latest)
		}
	}
}

func compareRegistrations(a, b Registration) int {
	switch {
	case a.Offset != b.Offset:
		return int(min(max(a.Offset-b.Offset, -1), 1))
	case a.Member < b.Member:
		return -1
	case a.Member > b.Member:
		return 1
	}
	return 0
}

// checkRanks asserts RankOf agrees with the roster and the lease.
func checkRanks(t *testing.T, s RoleState) {
	t.Helper()
	holder, holderRegistered := MemberID(""), false
	if s.Lease != nil {
		holder = s.Lease.Holder
		_, holderRegistered = s.RankOf(holder)
	}
	next := 0
	if holderRegistered {
		next = 1
	}
	for _, r := range s.Roster {
		rank, ok := s.RankOf(r.Member)
		want := next
		if r.Member == holder {
			want = 0
		} else {
			next++
		}
		if !ok || rank != want {
			t.Fatalf("RankOf(%s) = %d, %v, want %d\n%s", r.Member, rank, ok, want, formatState(s))
		}
	}
	for _, m := range append(slices.Clone(fuzzMembers), "absent", holder) {
		_, ok := s.RankOf(m)
		in := slices.ContainsFunc(s.Roster, func(r Registration) bool { return r.Member == m })
		if ok != in {
			t.Fatalf("RankOf(%q) ok=%v but in roster=%v\n%s", m, ok, in, formatState(s))
		}
	}
}
