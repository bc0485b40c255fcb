package ha

import "fmt"

// MaxStandbyLag is how many committed entries a STANDBY may not have
// applied yet and still report SERVING: one that trails by more is
// catching up (a restore, a long pause) and serves stale reads that are
// staler than a load balancer would expect.
const MaxStandbyLag = 512

// Serving decides whether a node in view v, with the commit and applied
// indexes it knows, serves (docs/design.md, "Interfaces that tests and
// operators rely on"): as a PRIMARY with write quorum, or as a STANDBY
// that knows its leader and is caught up; reason says why not. The gRPC
// health check reports it as SERVING, and /readyz?standby=1 as ready.
func Serving(v *View, commit, applied uint64) (serving bool, reason string) {
	switch {
	case v.Stopping:
		return false, "stopping"
	case v.Storage != "":
		return false, "storage failing: " + v.Storage
	case v.Role == RolePrimary:
		if !v.WriteQuorum {
			return false, "primary without write quorum"
		}
		return true, ""
	case v.Role == RoleStandby:
		if v.LeaderID == "" {
			return false, "standby without a known primary"
		}
		if commit > applied && commit-applied > MaxStandbyLag {
			return false, fmt.Sprintf("standby catching up: %d committed entries not applied", commit-applied)
		}
		return true, ""
	}
	return false, v.Role.String()
}
