// Package archtest holds docs/ARCHITECTURE.md to the code: its tests read
// the table of packages there and the imports `go list` reports, and fail
// when a package has no row, a row's import list differs from what the
// package imports, a row's layer is not one more than the highest layer
// it imports, or a rule of the document is broken (transport and the
// engines' contract linking a GPU package, a package below cmd importing
// internal/loadbench). It has no code of its own.
package archtest
