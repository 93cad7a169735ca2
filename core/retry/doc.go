// Package retry is how tollgate's clients back off when a server throttles
// them: the jitter and cap policy shared by the gRPC client interceptors
// (github.com/tollgate-go/tollgate/grpclimit) and by [Transport], an
// http.RoundTripper for HTTP clients.
//
// The rules, from the project's wire semantics:
//
//   - A throttled answer carries a hint: Retry-After (HTTP, delta seconds),
//     RetryInfo or grpc-retry-pushback-ms (gRPC). The client waits at least
//     that long: jitter is added on top, never taken off, so that a crowd of
//     clients throttled at the same instant does not come back at the same
//     instant, and none comes back early (which would only be denied again).
//   - A "never" answer (the cost exceeds the bucket's capacity: HTTP 429
//     without Retry-After, gRPC pushback -1) is returned at once, never
//     retried. So is an answer without a hint: the client cannot know when
//     a retry could succeed.
//   - Waits are capped ([WithMaxDelay]) and attempts are counted
//     ([WithMaxAttempts]). A hint longer than the cap is not retried: a
//     shorter wait would be denied again. A context that is cancelled, or
//     whose deadline would pass before the wait ends, stops the retries.
//
// The policy is framework-free: [Policy.Delay] turns a [Hint] into a wait,
// and [Policy.Sleep] waits it out under a context.
package retry
