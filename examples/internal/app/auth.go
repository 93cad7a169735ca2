package app

import (
	"errors"
	"fmt"
	"log/slog"
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

// ExpiryLeeway is how long after its exp a token is still accepted: room
// for clocks that differ a little between the issuer and the service.
const ExpiryLeeway = 5 * time.Second

// ErrUnauthenticated is wrapped by every verification failure.
var ErrUnauthenticated = errors.New("unauthenticated")

// The details a 401 (gRPC: the Unauthenticated message) may give, fixed
// texts. The JWT parser's own error never reaches the client (it can name
// the check that failed, which helps an attacker more than a user): it
// goes to the service's log.
const (
	DetailNoToken   = "no bearer token"
	DetailNotBearer = "want Authorization: Bearer <token>"
	DetailExpired   = "the token has expired"
	DetailInvalid   = "the token is not valid here (malformed, not signed with this service's secret, or without an expiry)"
	DetailTenant    = "the token's tenant claim is empty or too long"
	DetailTier      = "the token's tier is not defined here"
)

// authError is a verification failure: detail is what the client is told,
// cause (when there is one) what only the log says.
type authError struct {
	detail string
	cause  error
}

func (e *authError) Error() string {
	if e.cause == nil {
		return e.detail
	}
	return e.detail + ": " + e.cause.Error()
}

func (e *authError) Unwrap() []error { return []error{ErrUnauthenticated, e.cause} }

// Detail is the fixed text a 401 gives for err, a verification failure.
func Detail(err error) string {
	var ae *authError
	if errors.As(err, &ae) {
		return ae.detail
	}
	return DetailInvalid
}

// Verifier checks HS256 bearer tokens and turns them into tenants.
type Verifier struct {
	secret    []byte
	knownTier func(string) bool
	parser    *jwt.Parser
	log       *slog.Logger
}

// SetLogger names the logger that hears why each token was refused (the
// default is slog.Default()).
func (v *Verifier) SetLogger(l *slog.Logger) { v.log = l }

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
			jwt.WithLeeway(ExpiryLeeway),
		),
		log: slog.Default(),
	}, nil
}

// Verify checks a token (without the "Bearer " prefix) and returns its
// tenant.
func (v *Verifier) Verify(token string) (quota.Tenant, error) {
	var c Claims
	_, err := v.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return v.secret, nil })
	if err != nil {
		detail := DetailInvalid
		if errors.Is(err, jwt.ErrTokenExpired) {
			detail = DetailExpired
		}
		return quota.Tenant{}, v.refuse(detail, err)
	}
	if c.Tenant == "" || len(c.Tenant) > quota.MaxTenantIDLen {
		return quota.Tenant{}, v.refuse(DetailTenant, fmt.Errorf("tenant claim of %d bytes, want 1 to %d", len(c.Tenant), quota.MaxTenantIDLen))
	}
	if v.knownTier != nil && !v.knownTier(c.Tier) {
		return quota.Tenant{}, v.refuse(DetailTier, fmt.Errorf("tier %q", c.Tier))
	}
	return quota.Tenant{ID: c.Tenant, Tier: c.Tier}, nil
}

// refuse logs why a token was refused and returns the failure.
func (v *Verifier) refuse(detail string, cause error) error {
	err := &authError{detail: detail, cause: cause}
	if v.log != nil {
		v.log.Info("tollgate-example: bearer token refused", "detail", detail, "err", cause)
	}
	return err
}

// Authenticate verifies an Authorization header (or gRPC metadata) value,
// "Bearer <token>".
func (v *Verifier) Authenticate(authorization string) (quota.Tenant, error) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if authorization == "" {
		return quota.Tenant{}, &authError{detail: DetailNoToken}
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return quota.Tenant{}, &authError{detail: DetailNotBearer}
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
// problem+json body saying why in a fixed text (Detail). Every example
// sends it the same way.
func Unauthorized(err error) (status int, contentType string, body []byte) {
	p := render.UnauthenticatedProblem()
	if err != nil {
		p.Detail = Detail(err)
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
