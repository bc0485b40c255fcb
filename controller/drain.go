package controller

import "errors"

// Reasons worker drains may not be written.
var (
	drainsNotPrimary = "worker drains are written by the PRIMARY"
	drainGateClosed  = "worker drains wait until every voter is asked for its log format"
)

// DrainsWritable is nil once worker drains may be written in this term:
// every voter reported a log format that applies them.
func (n *Node) DrainsWritable() error {
	if why := n.drains.Load(); why != nil {
		return errors.New(*why)
	}
	return nil
}
