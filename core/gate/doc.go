// Package gate is the request flow every HTTP and gRPC adapter shares: find
// the verified tenant in the context ([ContextWithTenant]), map the route to
// a class and cost ([Routes], [CostFunc]), check it with a core.Limiter, and
// render the answer ([Verdict]: status, headers, problem body, through
// package render). A [Gate] is built once with [New], which validates every
// option and names the one at fault; adapters call [Gate.Decide] before the
// handler and [Verdict.Done] after it, and only translate the Verdict.
package gate
