package raft

import "fmt"

// MaxTerm bounds the terms a node accepts, from its own disk or from a
// peer. Terms grow by one per election, so no honest cluster comes near it;
// a term at or above it is damage or a hostile peer, and accepting it would
// let the next election wrap the term back to zero.
const MaxTerm uint64 = 1 << 62

// TermOK reports whether t is a term a node may hold.
func TermOK(t uint64) bool { return t < MaxTerm }

// badTermError is a term outside TermOK where a request or response carries
// one.
type badTermError struct {
	field string
	term  uint64
}

func (e *badTermError) Error() string {
	return fmt.Sprintf("%s %d is not a valid term (must be below %d)", e.field, e.term, MaxTerm)
}

// checkTerms returns an error for the first term in an RPC request or
// response that is not TermOK: a message's own term, the log terms a
// request describes (PrevLogTerm, LastLogTerm) and those of the entries it
// carries. Other messages pass.
func checkTerms(msg interface{}) error {
	check := func(field string, t uint64) error {
		if TermOK(t) {
			return nil
		}
		return &badTermError{field: field, term: t}
	}
	switch m := msg.(type) {
	case *AppendEntriesRequest:
		if err := check("Term", m.Term); err != nil {
			return err
		}
		if err := check("PrevLogTerm", m.PrevLogTerm); err != nil {
			return err
		}
		for _, e := range m.Entries {
			if e != nil {
				if err := check(fmt.Sprintf("term of entry %d", e.Index), e.Term); err != nil {
					return err
				}
			}
		}
	case *RequestVoteRequest:
		if err := check("Term", m.Term); err != nil {
			return err
		}
		return check("LastLogTerm", m.LastLogTerm)
	case *RequestPreVoteRequest:
		if err := check("Term", m.Term); err != nil {
			return err
		}
		return check("LastLogTerm", m.LastLogTerm)
	case *InstallSnapshotRequest:
		if err := check("Term", m.Term); err != nil {
			return err
		}
		return check("LastLogTerm", m.LastLogTerm)
	case *AppendEntriesResponse:
		return check("Term", m.Term)
	case *RequestVoteResponse:
		return check("Term", m.Term)
	case *RequestPreVoteResponse:
		return check("Term", m.Term)
	case *InstallSnapshotResponse:
		return check("Term", m.Term)
	}
	return nil
}
