package app

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
)

// DevSecret signs and verifies tokens when TOLLGATE_JWT_SECRET is not set.
// It is public: never run a service reachable by others on it.
const DevSecret = "tollgate-example-development-secret"

// MinSecretLen is the shortest HS256 secret accepted, in bytes.
const MinSecretLen = 16

// Claims are the token's claims: who the tenant is and its tier, with a
// required expiry.
type Claims struct {
	Tenant string `json:"tenant"`
	Tier   string `json:"tier"`
	jwt.RegisteredClaims
}

// ErrUnauthenticated is wrapped by every verification failure.
var ErrUnauthenticated = errors.New("unauthenticated")

// Verifier checks HS256 bearer tokens and turns them into tenants.
type Verifier struct {
	secret    []byte
	knownTier func(string) bool
	parser    *jwt.Parser
}

// NewVerifier returns a verifier of tokens signed with secret. knownTier,
// when not nil, refuses tokens naming a tier the service does not define.
func NewVerifier(secret []byte, knownTier func(string) bool) (*Verifier, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("TOLLGATE_JWT_SECRET: %d bytes, want at least %d", len(secret), MinSecretLen)
	}
	return &Verifier{
		secret:    secret,
		knownTier: knownTier,
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
			jwt.WithExpirationRequired(),
			jwt.WithLeeway(5*time.Second),
		),
	}, nil
}

// Verify checks a token (without the "Bearer " prefix) and returns its
// tenant.
func (v *Verifier) Verify(token string) (quota.Tenant, error) {
	var c Claims
	_, err := v.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return v.secret, nil })
	if err != nil {
		return quota.Tenant{}, fmt.Errorf("%w: invalid token: %w", ErrUnauthenticated, err)
	}
	if c.Tenant == "" || len(c.Tenant) > quota.MaxTenantIDLen {
		return quota.Tenant{}, fmt.Errorf("%w: the token's tenant claim is empty or longer than %d bytes", ErrUnauthenticated, quota.MaxTenantIDLen)
	}
	if v.knownTier != nil && !v.knownTier(c.Tier) {
		return quota.Tenant{}, fmt.Errorf("%w: the token's tier %q is not defined here", ErrUnauthenticated, c.Tier)
	}
	return quota.Tenant{ID: c.Tenant, Tier: c.Tier}, nil
}

// Authenticate verifies an Authorization header (or gRPC metadata) value,
// "Bearer <token>".
func (v *Verifier) Authenticate(authorization string) (quota.Tenant, error) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if authorization == "" {
		return quota.Tenant{}, fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return quota.Tenant{}, fmt.Errorf("%w: want Authorization: Bearer <token>", ErrUnauthenticated)
	}
	return v.Verify(strings.TrimSpace(token))
}

// Mint returns a token for tenant on tier, valid for ttl.
func Mint(secret []byte, tenant, tier string, ttl time.Duration) (string, error) {
	if len(secret) < MinSecretLen {
		return "", fmt.Errorf("secret: %d bytes, want at least %d", len(secret), MinSecretLen)
	}
	if tenant == "" {
		return "", errors.New("tenant: empty")
	}
	if ttl <= 0 {
		return "", fmt.Errorf("ttl: %v, want > 0", ttl)
	}
	now := time.Now()
	c := Claims{Tenant: tenant, Tier: tier, RegisteredClaims: jwt.RegisteredClaims{
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}

// Unauthorized is the 401 answer to a request whose token failed: a
// problem+json body saying why. Every example sends it the same way.
func Unauthorized(err error) (status int, contentType string, body []byte) {
	p := render.UnauthenticatedProblem()
	if err != nil {
		p.Detail = err.Error()
	}
	return p.Status, render.ProblemContentType, p.JSON()
}

// WWWAuthenticate is the challenge sent with every 401.
const WWWAuthenticate = `Bearer realm="tollgate-example"`

// RequireTenant is net/http authentication middleware: it verifies the
// bearer token and stores the tenant with gate.ContextWithTenant, or
// answers 401.
func (v *Verifier) RequireTenant(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, err := v.Authenticate(r.Header.Get("Authorization"))
		if err != nil {
			status, ct, body := Unauthorized(err)
			w.Header().Set("WWW-Authenticate", WWWAuthenticate)
			w.Header().Set("Content-Type", ct)
			w.WriteHeader(status)
			_, _ = w.Write(body)
			return
		}
		next.ServeHTTP(w, r.WithContext(gate.ContextWithTenant(r.Context(), t)))
	})
}
