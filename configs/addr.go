package configs

import "errors"

// CheckDialAddr checks s as an address another process dials (HOST:PORT,
// with a concrete host), by the rule Validate applies to peer_addr; a
// client that takes addresses on its command line refuses a bad one before
// sending anything.
func CheckDialAddr(s string) error {
	if msg := addrProblem(s, true); msg != "" {
		return errors.New(msg)
	}
	return nil
}
