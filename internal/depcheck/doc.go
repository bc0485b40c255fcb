// Package depcheck holds the test that keeps the libraries other programs
// embed, the client and the worker, free of the server's dependencies: a
// program that runs a worker links no Raft, no Prometheus and no zerolog
// (docs/design.md, "The parts").
package depcheck
