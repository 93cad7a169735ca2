// Package examples holds tollgate's runnable examples and its demo; see the
// subdirectories.
package examples
