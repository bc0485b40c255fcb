package controller

import "errors"

// Reasons worker drains may not be written.
var (
	drainsNotPrimary = "worker drains are written by the PRIMARY"
	drainGateClosed  = "worker drains wait until every voter is asked for its log format"
)

// Reasons placement commands (freezes, weighted submits) may not be
// written.
var (
	placementNotPrimary = "placement freezes and task weights are written by the PRIMARY"
	placementGateClosed = "placement freezes and task weights wait until every voter is asked for its log format"
)

// Reasons worker addresses may not be written.
var (
	workerAddrsNotPrimary = "worker addresses are written by the PRIMARY"
	workerAddrsGateClosed = "worker addresses wait until every voter is asked for its log format"
)

// PlacementWritable is nil once the commands of log format 5 (a placement
// freeze, a submit with a weight above 1) may be written in this term:
// every voter reported a log format that applies them.
func (n *Node) PlacementWritable() error {
	if why := n.placement.Load(); why != nil {
		return errors.New(*why)
	}
	return nil
}

// DrainsWritable is nil once worker drains may be written in this term:
// every voter reported a log format that applies them.
func (n *Node) DrainsWritable() error {
	if why := n.drains.Load(); why != nil {
		return errors.New(*why)
	}
	return nil
}

// WorkerAddrsWritable is nil once worker addresses (log format 6) may be
// written in this term: every voter reported a log format that applies
// them. The placement service writes them only then.
func (n *Node) WorkerAddrsWritable() error {
	if why := n.workerAddrs.Load(); why != nil {
		return errors.New(*why)
	}
	return nil
}
