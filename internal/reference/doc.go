// Package reference holds the generator of docs/reference/metrics.md: its
// test reads every Prometheus metric the source defines (name, type, labels,
// help) and fails when the page is stale. `make docs` rewrites the page.
// Its other tests check the docs against the code: every file and section
// cited exists, the package table of docs/design.md lists each package's
// imports, operations.md states the defaults the config reference does,
// and no function is over 100 lines.
package reference
