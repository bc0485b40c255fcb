//go:build !unix

package netio

import "errors"

// fdLimit is unknown here: the caps are used as configured.
func fdLimit() (uint64, error) { return 0, errors.New("RLIMIT_NOFILE is not available on this system") }
