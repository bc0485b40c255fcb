package ha

import "errors"

// ErrMemberRefused wraps every membership change a backend refuses before
// it writes anything: an unknown or duplicate id, a peer address another
// member uses, promoting or transferring to a server of the wrong kind.
// Nothing has changed; retrying the same request fails the same way.
var ErrMemberRefused = errors.New("membership change refused")
