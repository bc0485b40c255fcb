package bench

import "testing"

func TestSinceListen(t *testing.T) {
	for _, tc := range []struct {
		name   string
		since  float64
		phases []Phase
		want   float64
	}{
		{"from listen", 0.4, []Phase{{Name: "listen", AtSeconds: 0.01}, {Name: "first_role", AtSeconds: 0.3}}, 0.39},
		{"no listen phase", 0.4, []Phase{{Name: "first_role", AtSeconds: 0.3}}, 0.4},
		{"no phases", 0.4, nil, 0.4},
		{"listen after the moment", 0.4, []Phase{{Name: "listen", AtSeconds: 0.5}}, 0.4},
	} {
		if got := sinceListen(tc.since, tc.phases); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("%s: sinceListen = %v, want %v", tc.name, got, tc.want)
		}
	}
}
