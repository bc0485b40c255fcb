package integration

import (
	"testing"
	"time"
)

// TestFiveNodesKillPrimaryUnderLoad: a five-node cluster elects one PRIMARY
// and four STANDBYs, loses its PRIMARY to SIGKILL under a write load, elects
// among the four left, takes the victim back, and its history checks out
// (linearizable, nothing acknowledged lost, nothing applied twice).
func TestFiveNodesKillPrimaryUnderLoad(t *testing.T) {
	c := newCluster(t, 5, WithLogLevel("info"))
	c.StartAll()
	p := c.WaitRoles(raceSlack(20 * time.Second))
	load := startLoad(t, c.Addrs(), 32)
	load.waitProgress(t, 200, 30*time.Second)
	killPrimaryUnderLoad(t, c, p, load)
}
