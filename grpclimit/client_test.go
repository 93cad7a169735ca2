package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/retry"
	"github.com/tollgate-go/tollgate/grpclimit"
	"github.com/tollgate-go/tollgate/grpclimit/internal/testpb"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fastRoutes sends every method to class fast: capacity 1, a denial waits
// 200 ms. neverRoutes asks more than a capacity.
var (
	fastRoutes  = gate.Routes{mProfile: {Class: "fast", Cost: 1}, mExport: {Class: "fast", Cost: 1}, mUpload: {Class: "fast", Cost: 1}}
	neverRoutes = gate.Routes{mProfile: {Class: "tiny", Cost: 3}, mExport: {Class: "tiny", Cost: 3}, mUpload: {Class: "tiny", Cost: 3}}
)

// retryServiceConfig is grpc-go's own retry for RESOURCE_EXHAUSTED with a
// 1 ms backoff: a retry that waits 200 ms can only be the server's
// pushback.
const retryServiceConfig = `{"methodConfig": [{
  "name": [{"service": "tollgate.test.v1.TestService"}],
  "retryPolicy": {
    "maxAttempts": 4,
    "initialBackoff": "0.001s",
    "maxBackoff": "0.001s",
    "backoffMultiplier": 1,
    "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]
  }
}]}`

func TestGRPCRetryPolicyHonoursPushback(t *testing.T) {
	forEachShape(t, func(t *testing.T, call caller) {
		t.Run("over limit: retried after the pushback", func(t *testing.T) {
			e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, redistest.Client(t)), gate.WithRoutes(fastRoutes)))
			cl := e.client(t, grpc.WithDefaultServiceConfig(retryServiceConfig))
			ctx := as("t1", "")
			if r := call(ctx, cl); r.err != nil {
				t.Fatal(r.err)
			}
			if r := call(ctx, cl); r.err != nil {
				t.Fatalf("second call: %v, want success after grpc-go retried", r.err)
			}
			arr := e.arrivalTimes()
			if len(arr) < 3 || e.svc.calls.Load() != 2 {
				t.Fatalf("%d attempts reached the server, the handler ran %d times; want >= 3 and 2", len(arr), e.svc.calls.Load())
			}
			// The token is back 200 ms after the first call was charged (after
			// it arrived): the attempt admitted arrived no sooner. Each denial's
			// pushback is what is left of those 200 ms when it is made, so on a
			// loaded machine, where the second call starts late, it is shorter;
			// what no pushback would give is grpc-go's 1 ms backoff: its four
			// attempts spent within milliseconds, and the call failed.
			if span := arr[len(arr)-1].Sub(arr[0]); span < 190*time.Millisecond || span > 5*time.Second {
				t.Fatalf("the admitted retry arrived %v after the first call, want 200 ms (the refill) to 5 s", span)
			}
		})
		t.Run("never: pushback -1 stops grpc-go", func(t *testing.T) {
			e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, redistest.Client(t)), gate.WithRoutes(neverRoutes)))
			cl := e.client(t, grpc.WithDefaultServiceConfig(retryServiceConfig))
			r := call(as("t1", ""), cl)
			if r.st.Code() != codes.ResourceExhausted || first(r.trailer, "grpc-retry-pushback-ms") != "-1" {
				t.Fatalf("%v, trailer %v", r.err, r.trailer)
			}
			if n := e.attempts.Load(); n != 1 {
				t.Fatalf("grpc-go sent %d attempts of a never-satisfiable call, want 1", n)
			}
		})
	})
}

// recorder is a retry.WithSleep that records waits instead of sleeping.
type recorder struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (r *recorder) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	r.waits = append(r.waits, d)
	r.mu.Unlock()
	return ctx.Err()
}

func (r *recorder) all() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.waits...)
}

// clientShapes: the unary interceptor with GetProfile, the stream one with
// ExportReport.
var clientShapes = []struct {
	name string
	dial func(opts ...retry.Option) grpc.DialOption
	call caller
}{
	{"unary", func(o ...retry.Option) grpc.DialOption {
		return grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(o...))
	}, getProfile},
	{"stream", func(o ...retry.Option) grpc.DialOption {
		return grpc.WithStreamInterceptor(grpclimit.StreamClientInterceptor(o...))
	}, export},
}

func TestClientInterceptors(t *testing.T) {
	for _, s := range clientShapes {
		t.Run(s.name, func(t *testing.T) {
			c := redistest.Client(t)
			// drained returns an env whose clock stands still and a client
			// dialled with opts, after spending the 3 tokens of tenant t1:
			// every call of t1 from then on is denied, with a 1 s hint.
			drained := func(t *testing.T, opts ...retry.Option) (*env, testpb.TestServiceClient) {
				t.Helper()
				e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, c, core.WithClock(testkit.NewFakeClock().Now))))
				cl := e.client(t, s.dial(opts...))
				for range 3 {
					s.call(as("t1", ""), cl)
				}
				return e, cl
			}
			t.Run("retries after the hint", func(t *testing.T) {
				e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, c), gate.WithRoutes(fastRoutes)))
				cl := e.client(t, s.dial(retry.WithJitter(0.5, 0)))
				ctx := as("t1", "")
				if r := s.call(ctx, cl); r.err != nil {
					t.Fatal(r.err)
				}
				if r := s.call(ctx, cl); r.err != nil {
					t.Fatalf("throttled call not retried to success: %v", r.err)
				}
				arr := e.arrivalTimes()
				if len(arr) != 3 || e.svc.calls.Load() != 2 {
					t.Fatalf("%d attempts, %d handler calls; want 3, 2", len(arr), e.svc.calls.Load())
				}
				// 200 ms, plus up to 100 ms of jitter, plus scheduling
				if g := arr[2].Sub(arr[1]); g < 195*time.Millisecond || g > 2*time.Second {
					t.Fatalf("retried after %v, want 200-300 ms", g)
				}
			})
			t.Run("never is not retried", func(t *testing.T) {
				e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, c), gate.WithRoutes(neverRoutes)))
				r := s.call(as("t1", ""), e.client(t, s.dial()))
				if r.st.Code() != codes.ResourceExhausted || e.attempts.Load() != 1 {
					t.Fatalf("%v after %d attempts; want ResourceExhausted after 1", r.err, e.attempts.Load())
				}
			})
			t.Run("jitter spreads waits upward within the cap", func(t *testing.T) {
				var rec recorder // every retry is denied again, 1 s
				e, cl := drained(t, retry.WithMaxAttempts(3), retry.WithSleep(rec.sleep), retry.WithRand(rand.New(rand.NewPCG(5, 6))))
				const n = 60
				for range n {
					if r := s.call(as("t1", ""), cl); r.st.Code() != codes.ResourceExhausted {
						t.Fatalf("%v", r.err)
					}
				}
				waits := rec.all()
				if len(waits) != 2*n || e.attempts.Load() != int64(3+3*n) {
					t.Fatalf("%d waits, %d attempts; want %d, %d", len(waits), e.attempts.Load(), 2*n, 3+3*n)
				}
				var low int
				for _, w := range waits {
					if w < time.Second || w >= 1200*time.Millisecond {
						t.Fatalf("wait %v outside [1 s, 1.2 s): jitter must be upward and within 20%%", w)
					}
					if w < 1100*time.Millisecond {
						low++
					}
				}
				if low < n/3 || low > 2*n-n/3 {
					t.Fatalf("%d of %d waits in the lower half of the spread: not spread", low, 2*n)
				}
			})
			t.Run("hint over the cap is not waited for", func(t *testing.T) {
				e, cl := drained(t, retry.WithMaxDelay(500*time.Millisecond))
				start := time.Now()
				if r := s.call(as("t1", ""), cl); r.st.Code() != codes.ResourceExhausted || e.attempts.Load() != 4 || time.Since(start) > time.Second {
					t.Fatalf("%v after %d attempts, %v", r.err, e.attempts.Load(), time.Since(start))
				}
			})
			t.Run("context cancelled during the wait", func(t *testing.T) {
				e, cl := drained(t)
				ctx, cancel := context.WithCancel(as("t1", ""))
				time.AfterFunc(50*time.Millisecond, cancel)
				start := time.Now()
				r := s.call(ctx, cl)
				if r.st.Code() != codes.Canceled || time.Since(start) > 900*time.Millisecond || e.attempts.Load() != 4 {
					t.Fatalf("%v after %v and %d attempts; want Canceled at once, no retry", r.err, time.Since(start), e.attempts.Load())
				}
			})
			t.Run("deadline before the retry", func(t *testing.T) {
				e, cl := drained(t)
				ctx, cancel := context.WithTimeout(as("t1", ""), 500*time.Millisecond)
				defer cancel()
				if r := s.call(ctx, cl); r.st.Code() != codes.ResourceExhausted || e.attempts.Load() != 4 {
					t.Fatalf("%v after %d attempts; want the ResourceExhausted at once", r.err, e.attempts.Load())
				}
			})
			t.Run("other errors are not retried", func(t *testing.T) {
				e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, deadRedis(t), core.WithTimeout(200*time.Millisecond), core.WithFailurePolicy(core.FailClosed))))
				cl := e.client(t, s.dial())
				if r := s.call(as("t1", ""), cl); r.st.Code() != codes.Unavailable || e.attempts.Load() != 1 {
					t.Fatalf("fail-closed: %v after %d attempts", r.err, e.attempts.Load())
				}
				if r := s.call(context.Background(), cl); r.st.Code() != codes.Unauthenticated || e.attempts.Load() != 2 {
					t.Fatalf("no tenant: %v after %d attempts", r.err, e.attempts.Load())
				}
			})
		})
	}
}

// upload sends n chunks on a bidi Upload stream, closes, and reads the
// acks.
func upload(ctx context.Context, cl testpb.TestServiceClient, n int) (acks int, err error) {
	st, err := cl.Upload(ctx)
	if err != nil {
		return 0, err
	}
	for range n {
		if err := st.Send(&testpb.UploadChunk{Data: []byte("x")}); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return 0, err
		}
	}
	if err := st.CloseSend(); err != nil {
		return 0, err
	}
	for {
		if _, err := st.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return acks, nil
			}
			return acks, err
		}
		acks++
	}
}

func TestStreamClientInterceptorReplays(t *testing.T) {
	e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, redistest.Client(t)), gate.WithRoutes(fastRoutes)))
	cl := e.client(t, grpc.WithStreamInterceptor(grpclimit.StreamClientInterceptor()))
	ctx := as("t1", "")
	if acks, err := upload(ctx, cl, 1); err != nil || acks != 1 {
		t.Fatalf("first upload: %d acks, %v", acks, err)
	}
	// denied when it opens: the three chunks sent meanwhile are sent again
	// on the retried stream, once
	if acks, err := upload(ctx, cl, 3); err != nil || acks != 3 {
		t.Fatalf("retried upload: %d acks, %v", acks, err)
	}
	if e.attempts.Load() != 3 || e.svc.received.Load() != 4 {
		t.Fatalf("%d attempts, %d chunks received; want 3, 4 (no duplicates)", e.attempts.Load(), e.svc.received.Load())
	}
}

func TestMessageCost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, c redis.UniversalClient) {
		clock := testkit.NewFakeClock()
		e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, c, core.WithClock(clock.Now))), grpclimit.WithMessageCost("upload", 1))
		// the client interceptor must not retry a denial that came after
		// the stream had started answering
		cl := e.client(t, grpc.WithStreamInterceptor(grpclimit.StreamClientInterceptor()))
		st, err := cl.Upload(as("t1", ""))
		if err != nil {
			t.Fatal(err)
		}
		var acks int
		var rerr error
		for range 3 {
			if err := st.Send(&testpb.UploadChunk{}); err != nil {
				break
			}
			if _, rerr = st.Recv(); rerr != nil {
				break
			}
			acks++
		}
		s := status.Convert(rerr)
		if acks != 2 || s.Code() != codes.ResourceExhausted {
			t.Fatalf("%d acks then %v; want 2 then ResourceExhausted", acks, rerr)
		}
		d := decode(t, s)
		if len(d.info) != 1 || d.info[0].GetMetadata()["policy"] != "upload" || len(d.retry) != 1 || d.retry[0].GetRetryDelay().AsDuration() != time.Second || len(d.quota) != 1 {
			t.Fatalf("details %+v", d)
		}
		if first(st.Trailer(), "grpc-retry-pushback-ms") != "1000" || first(st.Trailer(), "ratelimit-policy") != `"upload";q=2;w=2` {
			t.Fatalf("trailer %v", st.Trailer())
		}
		if e.svc.received.Load() != 2 || e.attempts.Load() != 1 {
			t.Fatalf("handler received %d chunks over %d attempts; want 2 over 1", e.svc.received.Load(), e.attempts.Load())
		}
		// server streams receive their one request uncharged
		if r := export(as("t1", ""), cl); r.err != nil {
			t.Fatalf("export with message cost: %v", r.err)
		}
	})
}
