package dispatch

import (
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// clusterService implements xce.v1.ClusterService: membership, leadership
// and backups (docs/design.md, "Membership").
type clusterService struct {
	xcev1connect.UnimplementedClusterServiceHandler
	s *Service
}
