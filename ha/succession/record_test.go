package succession

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/xce/xce/internal/fielderr"
)

func TestRecordEncoding(t *testing.T) {
	type kv struct{ key, value []byte }
	pair := func(k, v []byte) kv { return kv{k, v} }
	for _, tc := range []struct {
		name      string
		got       kv
		wantKey   string
		wantValue string // "<nil>" for a tombstone
	}{
		{"registration", pair(RegistrationRecord("controller", "node-1")), "reg/controller/node-1", "reg v1 controller node-1"},
		{"deregistration", kv{DeregistrationKey("controller", "node-1"), nil}, "reg/controller/node-1", "<nil>"},
		{"lease", pair(LeaseRecord("controller", Lease{Holder: "node-2", DeadlineMillis: 1700000005000})),
			"lease/controller", "lease v1 controller node-2 1700000005000"},
		{"negative deadline", pair(LeaseRecord("controller", Lease{Holder: "n", DeadlineMillis: -5})),
			"lease/controller", "lease v1 controller n -5"},
		{"release", kv{LeaseKey("controller"), nil}, "lease/controller", "<nil>"},
		{"escaped", pair(RegistrationRecord("a/b c", "x/y%z")), "reg/a%2Fb%20c/x%2Fy%25z", "reg v1 a%2Fb%20c x%2Fy%25z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := "<nil>"
			if tc.got.value != nil {
				v = string(tc.got.value)
			}
			if string(tc.got.key) != tc.wantKey || v != tc.wantValue {
				t.Errorf("got %q = %q, want %q = %q", tc.got.key, v, tc.wantKey, tc.wantValue)
			}
		})
	}
}

func rec(off, at int64, k, v []byte) Record {
	return Record{Key: k, Value: v, Offset: off, TimestampMillis: at}
}

func reg(off, at int64, role string, m MemberID) Record {
	k, v := RegistrationRecord(role, m)
	return rec(off, at, k, v)
}

func lease(off, at int64, role string, m MemberID, deadline int64) Record {
	k, v := LeaseRecord(role, Lease{Holder: m, DeadlineMillis: deadline})
	return rec(off, at, k, v)
}

func raw(off int64, k, v string) Record {
	r := Record{Key: []byte(k), Offset: off}
	if v != "<nil>" {
		r.Value = []byte(v)
	}
	return r
}

func TestFoldRecords(t *testing.T) {
	for _, tc := range []struct {
		name string
		role string
		recs []Record
		want string // formatState
	}{{
		name: "empty",
		want: "roster:\nlease: none",
	}, {
		name: "registrations in offset order, timestamps as instants",
		recs: []Record{reg(3, 30, "r", "a"), reg(7, 70, "r", "b"), lease(9, 90, "r", "b", 1090)},
		want: "roster: a@3(t=30) b@7(t=70)\nlease: b until 1090",
	}, {
		name: "out of offset order is folded in offset order",
		recs: []Record{lease(9, 90, "r", "b", 1090), reg(7, 70, "r", "b"), lease(8, 80, "r", "a", 1080), reg(3, 30, "r", "a")},
		want: "roster: a@3(t=30) b@7(t=70)\nlease: b until 1090",
	}, {
		name: "latest registration counts, even when it arrives first",
		recs: []Record{reg(10, 100, "r", "a"), reg(1, 10, "r", "a"), reg(5, 50, "r", "b")},
		want: "roster: b@5(t=50) a@10(t=100)\nlease: none",
	}, {
		name: "tombstone removes the member; registering again lands at the tail",
		recs: []Record{
			reg(1, 10, "r", "a"), reg(2, 20, "r", "b"), raw(3, "reg/r/a", "<nil>"),
			reg(4, 40, "r", "c"), raw(5, "reg/r/c", "<nil>"), reg(6, 60, "r", "c"),
		},
		want: "roster: b@2(t=20) c@6(t=60)\nlease: none",
	}, {
		name: "tombstone before the registration does not remove it",
		recs: []Record{reg(5, 50, "r", "a"), raw(4, "reg/r/a", "<nil>")},
		want: "roster: a@5(t=50)\nlease: none",
	}, {
		name: "lease record replaces the lease; a tombstone releases it",
		recs: []Record{reg(1, 1, "r", "a"), lease(2, 2, "r", "a", 100), lease(3, 3, "r", "b", 200)},
		want: "roster: a@1(t=1)\nlease: b until 200",
	}, {
		name: "released lease",
		recs: []Record{reg(1, 1, "r", "a"), lease(2, 2, "r", "a", 100), raw(3, "lease/r", "<nil>")},
		want: "roster: a@1(t=1)\nlease: none",
	}, {
		name: "other roles are ignored",
		recs: []Record{
			reg(1, 1, "r", "a"), reg(2, 2, "other", "b"), lease(3, 3, "other", "b", 100),
			reg(4, 4, "r/x", "c"), reg(5, 5, "", "d"), reg(6, 6, "rr", "e"),
		},
		want: "roster: a@1(t=1)\nlease: none",
	}, {
		name: "a role with a slash is not confused with a shorter one",
		role: "r/x",
		recs: []Record{reg(1, 1, "r", "x"), reg(4, 4, "r/x", "c"), lease(5, 5, "r", "x", 9)},
		want: "roster: c@4(t=4)\nlease: none",
	}, {
		name: "keys that are not exactly ours are ignored",
		recs: []Record{
			reg(1, 1, "r", "a"),
			raw(2, "reg/r/a/b", "reg v1 r a%2Fb"),      // unescaped slash
			raw(3, "reg/r/%61", "reg v1 r a"),          // non-canonical escape of "a"
			raw(4, "reg/r/a%2f", "reg v1 r a%2F"),      // lower-case escape
			raw(5, "reg/r/", "reg v1 r "),              // empty member
			raw(6, "reg/r/%zz", "reg v1 r %zz"),        // bad escape
			raw(7, "reg/r", "<nil>"),                   // no member
			raw(8, "lease/r/", "lease v1 r a 100"),     // not the lease key
			raw(9, "Reg/r/a", "<nil>"),                 // case matters
			{Key: nil, Value: []byte("x"), Offset: 10}, // no key
		},
		want: "roster: a@1(t=1)\nlease: none",
	}, {
		name: "unusable registration value supersedes the earlier one and registers nobody",
		recs: []Record{
			reg(1, 1, "r", "a"), raw(2, "reg/r/a", "garbage"),
			raw(3, "reg/r/b", "reg v1 r a"), // names another member
			raw(4, "reg/r/c", ""),           // empty is not a tombstone
			raw(5, "reg/r/d", "reg v2 r d"), // unknown version
			raw(6, "reg/r/e", "reg v1 x e"), // another role's value
			reg(7, 7, "r", "f"),
		},
		want: "roster: f@7(t=7)\nlease: none",
	}, {
		name: "unusable lease value supersedes the earlier lease",
		recs: []Record{reg(1, 1, "r", "a"), lease(2, 2, "r", "a", 100), raw(3, "lease/r", "lease v1 r a soon")},
		want: "roster: a@1(t=1)\nlease: none",
	}, {
		name: "lease values must be exactly the encoding",
		recs: []Record{
			raw(1, "lease/r", "lease v1 r a 100"),
			raw(2, "lease/r", "lease v1 r a +100"),
		},
		want: "roster:\nlease: none",
	}, {
		name: "lease values must be exactly the encoding (good one last)",
		recs: []Record{
			raw(1, "lease/r", "lease v1 r a 0100"),
			raw(2, "lease/r", "lease v1 r  a 100"),
			raw(3, "lease/r", "lease v1 r a 100 "),
			raw(4, "lease/r", "lease v1 r %61 100"),
			raw(5, "lease/r", "lease v1 r  100"),
			raw(6, "lease/r", "lease v1 r a 99999999999999999999"),
			raw(7, "lease/r", "lease v1 r a%20b 100"),
		},
		want: "roster:\nlease: a b until 100",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			role := tc.role
			if role == "" {
				role = "r"
			}
			if got := formatState(FoldRecords(role, tc.recs)); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestFoldRecordsLeavesItsInputAlone(t *testing.T) {
	recs := []Record{lease(9, 90, "r", "b", 1090), reg(7, 70, "r", "b"), reg(3, 30, "r", "a")}
	before := slices.Clone(recs)
	FoldRecords("r", recs)
	if !reflect.DeepEqual(recs, before) {
		t.Fatalf("FoldRecords reordered its input: %v", recs)
	}
}

// TestFoldRecordsIsDeterministicEvenForDuplicateOffsets covers input that one
// partition never produces: the fold must not depend on map or input order.
func TestFoldRecordsIsDeterministicEvenForDuplicateOffsets(t *testing.T) {
	recs := []Record{reg(5, 1, "r", "c"), reg(5, 1, "r", "a"), reg(5, 1, "r", "b"), reg(2, 9, "r", "d")}
	for i := range 50 {
		slices.Reverse(recs)
		if got := formatState(FoldRecords("r", recs)); got != "roster: d@2(t=9) a@5(t=1) b@5(t=1) c@5(t=1)\nlease: none" {
			t.Fatalf("fold %d:\n%s", i, got)
		}
	}
}

// TestFoldRecordsIsTheSameBeforeAndAfterCompaction is why an unusable value
// supersedes: compaction keeps only the latest value of each key.
func TestFoldRecordsIsTheSameBeforeAndAfterCompaction(t *testing.T) {
	recs := []Record{
		reg(1, 1, "r", "a"), reg(2, 2, "r", "b"), lease(3, 3, "r", "a", 100),
		raw(4, "reg/r/a", "garbage"), raw(5, "lease/r", "garbage"), reg(6, 6, "r", "b"),
	}
	before := FoldRecords("r", recs)
	after := FoldRecords("r", compact(recs, false))
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("before compaction:\n%s\nafter:\n%s", formatState(before), formatState(after))
	}
}

// compact keeps the latest record of each key, as Kafka's log cleaner does,
// and with dropTombstones also removes tombstones (after delete.retention.ms).
func compact(recs []Record, dropTombstones bool) []Record {
	sorted := slices.Clone(recs)
	slices.SortFunc(sorted, compareRecords)
	latest := make(map[string]int)
	for i, r := range sorted {
		latest[string(r.Key)] = i
	}
	var out []Record
	for i, r := range sorted {
		if latest[string(r.Key)] == i && !(dropTombstones && r.Value == nil) {
			out = append(out, r)
		}
	}
	return out
}

func TestRankOf(t *testing.T) {
	roster := []Registration{{"a", 1, 0}, {"b", 2, 0}, {"c", 3, 0}, {"d", 4, 0}}
	for _, tc := range []struct {
		name  string
		lease *Lease
		want  string // rank of a, b, c, d, z
	}{
		{"no lease: offset order", nil, "0 1 2 3 -"},
		{"first member holds", &Lease{"a", 10}, "0 1 2 3 -"},
		{"third member holds", &Lease{"c", 10}, "1 2 0 3 -"},
		{"last member holds", &Lease{"d", 10}, "1 2 3 0 -"},
		{"expired lease still ranks its holder first", &Lease{"c", -10}, "1 2 0 3 -"},
		{"unregistered holder ranks nobody", &Lease{"z", 10}, "0 1 2 3 -"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := RoleState{Role: "r", Roster: roster, Lease: tc.lease}
			var got []string
			for _, m := range []MemberID{"a", "b", "c", "d", "z"} {
				r, ok := s.RankOf(m)
				switch {
				case !ok && r != 0:
					t.Errorf("RankOf(%s) = %d, false; want 0 with false", m, r)
				case !ok:
					got = append(got, "-")
				default:
					got = append(got, string(rune('0'+r)))
				}
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Errorf("ranks %s, want %s", g, tc.want)
			}
		})
	}
	if _, ok := (RoleState{}).RankOf("a"); ok {
		t.Error("RankOf in an empty roster is ok")
	}
}

func TestLeaseConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  LeaseConfig
		want string // "" for valid
	}{
		{DefaultLeaseConfig(), ""},
		{LeaseConfig{LeaseMillis: MinLeaseMillis, RenewMillis: 1}, ""},
		{LeaseConfig{LeaseMillis: 1000, RenewMillis: 300, StaggerMillis: 0}, ""},
		{LeaseConfig{LeaseMillis: 99, RenewMillis: 1}, "invalid lease config: lease_millis: must be at least 100ms, got 99ms"},
		{LeaseConfig{LeaseMillis: 0, RenewMillis: 300}, "invalid lease config: lease_millis: must be at least 100ms, got 0s\n" +
			"invalid lease config: renew_millis: must be positive and less than lease_millis (0s), got 300ms"},
		{LeaseConfig{LeaseMillis: 1000, RenewMillis: 0}, "invalid lease config: renew_millis: must be positive and less than lease_millis (1s), got 0s"},
		{LeaseConfig{LeaseMillis: 1000, RenewMillis: -1}, "invalid lease config: renew_millis: must be positive and less than lease_millis (1s), got -1ms"},
		{LeaseConfig{LeaseMillis: 1000, RenewMillis: 1000}, "invalid lease config: renew_millis: must be positive and less than lease_millis (1s), got 1s"},
		{LeaseConfig{LeaseMillis: 1000, RenewMillis: 300, StaggerMillis: -1}, "invalid lease config: stagger_millis: must not be negative, got -1ms"},
		{LeaseConfig{LeaseMillis: math.MaxInt64, RenewMillis: math.MaxInt64}, "invalid lease config: renew_millis: must be positive and less than lease_millis (9223372036854775807ms), got 9223372036854775807ms"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.cfg, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		case tc.want != "" && !errors.Is(err, ErrInvalidLeaseConfig):
			t.Errorf("%+v: %v is not ErrInvalidLeaseConfig", tc.cfg, err)
		case tc.want != "" && !errors.As(err, new(*fielderr.Error)):
			t.Errorf("%+v: %v holds no *fielderr.Error", tc.cfg, err)
		}
	}
}

func TestActionAndDecisionStrings(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{NotRegistered.String(), "NOT_REGISTERED"},
		{Hold.String(), "HOLD"},
		{Challenge.String(), "CHALLENGE"},
		{Wait.String(), "WAIT"},
		{Action(9).String(), "Action(9)"},
		{Decision{}.String(), "NOT_REGISTERED"},
		{hold(5).String(), "HOLD until=5"},
		{wait(7).String(), "WAIT until=7"},
		{challenge.String(), "CHALLENGE"},
	} {
		if tc.got != tc.want {
			t.Errorf("%q, want %q", tc.got, tc.want)
		}
	}
}

func TestGrantLastsLeaseMillisFromNow(t *testing.T) {
	if got := cfg.Grant("a", 250); got != (Lease{Holder: "a", DeadlineMillis: 1250}) {
		t.Fatalf("Grant = %+v", got)
	}
}
