// Package reference holds the generator of docs/reference/metrics.md: its
// test reads every Prometheus metric the source defines (name, type, labels,
// help) and fails when the page is stale. `make docs` rewrites the page.
// Its other tests check that every file and section the code and the docs
// cite exists.
package reference
