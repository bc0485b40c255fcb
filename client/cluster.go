package client

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// ErrFailedPrecondition: the primary refused a membership or leadership
// change, or a drain, in the cluster's current state (removing a voter
// would leave too few healthy voters for a quorum, promoting a member that
// has not caught up, transferring to a non-voter, a voter on a binary that
// does not apply drains, …); the message says which. Not retried: the same
// call would be refused again until the state changes.
var ErrFailedPrecondition = errors.New("refused in the cluster's current state")

// The ClusterService calls below go to the PRIMARY (only it changes the
// configuration, and only it knows every member's progress) with the same
// leader following and NOT_READY retry as every other call.
//
// Membership changes carry no request id: the server cannot tell a retry
// from a second request. A retry follows an attempt whose outcome is
// unknown (the node went away or the attempt timed out after it may have
// appended the change; a NOT_READY may come from a primary that lost its
// leadership after appending it). Adding a member again at the same
// addresses and promoting a voter are answered as the change made, so those
// are simply sent again. A removal or a transfer is not: before sending one
// again, the client reads the primary's configuration and stops if the
// member is gone (RemoveMember) or the leadership has moved
// (TransferLeader).

// clusterStubs returns a ClusterService stub per endpoint, made on first
// use by one call.
func (c *Client) clusterStubs() func(ep string) xcev1connect.ClusterServiceClient {
	stubs := map[string]xcev1connect.ClusterServiceClient{}
	return func(ep string) xcev1connect.ClusterServiceClient {
		s, ok := stubs[ep]
		if !ok {
			s = xcev1connect.NewClusterServiceClient(c.http, c.scheme+ep, c.connect...)
			stubs[ep] = s
		}
		return s
	}
}

// doCluster runs call on the ClusterService with the client's retry;
// attempt counts the attempts from 1, so a call knows when it is a retry.
func (c *Client) doCluster(ctx context.Context, call func(ctx context.Context, s xcev1connect.ClusterServiceClient, attempt int) error) error {
	attempt := 0
	err := retry(ctx, c, c.clusterStubs(), func(ctx context.Context, s xcev1connect.ClusterServiceClient) error {
		attempt++
		return call(ctx, s, attempt)
	})
	return preconditionErr(err)
}

// listMembers is one ListMembers attempt on s.
func listMembers(ctx context.Context, s xcev1connect.ClusterServiceClient, stale bool) (*xcev1.ListMembersResponse, error) {
	r, err := s.ListMembers(ctx, connect.NewRequest(&xcev1.ListMembersRequest{Consistency: consistency(stale)}))
	if err != nil {
		return nil, err
	}
	return r.Msg, nil
}

func findMember(ms []*xcev1.Member, id string) *xcev1.Member {
	for _, m := range ms {
		if m.Id == id {
			return m
		}
	}
	return nil
}

func primaryOf(ms []*xcev1.Member) string {
	for _, m := range ms {
		if m.Primary {
			return m.Id
		}
	}
	return ""
}

// ListMembers lists the members of the Raft configuration with the
// primary's view of each (health, last contact, lag, state). A stale list
// may come from a STANDBY, which reports only what it knows: the members
// and who is PRIMARY, not their progress.
func (c *Client) ListMembers(ctx context.Context, stale bool) (*xcev1.ListMembersResponse, error) {
	var out *xcev1.ListMembersResponse
	err := c.doCluster(ctx, func(ctx context.Context, s xcev1connect.ClusterServiceClient, _ int) error {
		r, err := listMembers(ctx, s, stale)
		if err == nil {
			out = r
		}
		return err
	})
	return out, err
}

// AddMember adds id, which listens for peers at peerAddr and for clients at
// clientAddr, as a non-voter; the primary promotes it once it has caught up
// (or PromoteMember does). Adding a member that is already there with the
// same addresses succeeds and returns it as it is ("already a member"), so
// a retry after an unknown outcome is harmless; one with other addresses is
// ErrAlreadyExists.
func (c *Client) AddMember(ctx context.Context, id, peerAddr, clientAddr string) (*xcev1.Member, error) {
	req := &xcev1.AddMemberRequest{Id: id, PeerAddr: peerAddr, ClientAddr: clientAddr}
	var out *xcev1.Member
	err := c.doCluster(ctx, func(ctx context.Context, s xcev1connect.ClusterServiceClient, _ int) error {
		r, err := s.AddMember(ctx, connect.NewRequest(req))
		if err == nil {
			out = r.Msg.Member
		}
		return err
	})
	return out, err
}

// PromoteMember makes the non-voter id a voter now, caught up or not,
// without waiting for the primary's own promotion. Promoting a voter
// succeeds and returns it, so a retry after an unknown outcome is harmless.
// An unknown id is ErrNotFound.
func (c *Client) PromoteMember(ctx context.Context, id string) (*xcev1.Member, error) {
	req := &xcev1.PromoteMemberRequest{Id: id}
	var out *xcev1.Member
	err := c.doCluster(ctx, func(ctx context.Context, s xcev1connect.ClusterServiceClient, _ int) error {
		r, err := s.PromoteMember(ctx, connect.NewRequest(req))
		if err == nil {
			out = r.Msg.Member
		}
		return err
	})
	return out, err
}

// RemoveMember removes id, voter or not. The primary refuses
// (ErrFailedPrecondition) to remove a voter when the healthy voters left
// could not form a quorum, unless force is set. A first attempt answered
// "not a member" is ErrNotFound (the id is wrong); a retry that finds the
// member gone succeeds, since an earlier attempt whose outcome is unknown
// may have removed it.
func (c *Client) RemoveMember(ctx context.Context, id string, force bool) error {
	req := &xcev1.RemoveMemberRequest{Id: id, Force: force}
	return c.doCluster(ctx, func(ctx context.Context, s xcev1connect.ClusterServiceClient, attempt int) error {
		if attempt > 1 {
			ms, err := listMembers(ctx, s, false)
			if err != nil {
				return err
			}
			if findMember(ms.Members, id) == nil {
				return nil
			}
		}
		_, err := s.RemoveMember(ctx, connect.NewRequest(req))
		return err
	})
}

// TransferLeader hands the leadership to voter to, or to the most
// caught-up voter when to is empty, and returns the new primary's id.
// A transfer sent twice would move the leadership twice, so the client
// notes the primary first and, before a retry, stops if the leadership has
// already moved (to to, or away from the noted primary; a list that named
// no primary leaves only the server's answer to go by).
func (c *Client) TransferLeader(ctx context.Context, to string) (string, error) {
	var from string
	if to == "" {
		ms, err := c.ListMembers(ctx, false)
		if err != nil {
			return "", err
		}
		from = primaryOf(ms.Members)
	}
	req := &xcev1.TransferLeaderRequest{To: to}
	var out string
	err := c.doCluster(ctx, func(ctx context.Context, s xcev1connect.ClusterServiceClient, attempt int) error {
		if attempt > 1 {
			ms, err := listMembers(ctx, s, false)
			if err != nil {
				return err
			}
			p := primaryOf(ms.Members)
			if p != "" && (p == to || to == "" && from != "" && p != from) {
				out = p
				return nil
			}
		}
		r, err := s.TransferLeader(ctx, connect.NewRequest(req))
		if err == nil {
			out = r.Msg.LeaderId
		}
		return err
	})
	return out, err
}
