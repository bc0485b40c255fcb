// Package reference holds the generator of docs/reference/metrics.md: its
// test reads every Prometheus metric the source defines (name, type, labels,
// help) and fails when the page is stale. `make docs` rewrites the page.
package reference
