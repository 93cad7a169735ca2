// Package test holds the tests of the rls module that need the conformance
// suite and the real-Redis harness, in a module of its own so that rls
// itself depends only on core, gRPC and go-control-plane.
package test
