package client

import (
	"testing"
	"time"
)

// A member refresh is due at the first call and every after the last; a
// warming every warmEvery, the first warmEvery after the first call, so a
// client that calls once warms nothing.
func TestScheduleDue(t *testing.T) {
	const (
		long   = 30 * time.Second // RefreshInterval
		urgent = minRefresh
	)
	type call struct {
		at, every     time.Duration // since the first call
		refresh, warm bool
	}
	for _, tc := range []struct {
		name   string
		warmer bool
		calls  []call
	}{
		{"one call: a refresh, no warming", true, []call{{0, long, true, false}}},
		{"calls for a while: a warming every second from the first call", true, []call{
			{0, long, true, false},
			{warmEvery / 2, long, false, false},
			{warmEvery, long, false, true},
			{warmEvery * 3 / 2, long, false, false},
			{2 * warmEvery, long, false, true},
			{long, long, true, true},
		}},
		{"a failing call: a refresh minRefresh after the last", true, []call{
			{0, urgent, true, false},
			{urgent - time.Millisecond, urgent, false, false},
			{urgent, urgent, true, true},
		}},
		{"a transport that cannot warm", false, []call{
			{0, long, true, false},
			{5 * warmEvery, long, false, false},
			{long, long, true, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Unix(1_000_000, 0)
			var s schedule
			for _, c := range tc.calls {
				refresh, warm := s.due(t0.Add(c.at), c.every, tc.warmer)
				if refresh != c.refresh || warm != c.warm {
					t.Errorf("call at +%v: refresh %v, warm %v; want %v, %v", c.at, refresh, warm, c.refresh, c.warm)
				}
			}
		})
	}
}
