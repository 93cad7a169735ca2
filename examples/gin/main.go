// Command gin is the example service on Gin with tollgate's ginlimit
// middleware. The nethttp, echo, fiber and grpc examples serve the same
// API, so they can be compared.
//
//	cd examples && TOLLGATE_DEMO=1 go run ./gin
//	curl -H "Authorization: Bearer $(go run ./cmd/mint -tenant t42)" localhost:8092/v1/profile
//
// See ../README.md for the environment it reads.
package main

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/ginlimit"
)

func main() {
	gin.SetMode(gin.ReleaseMode)
	app.MainHTTP("gin", NewHandler)
}

// NewHandler returns the service: /healthz and /metrics open, the /v1
// routes behind authentication and then the limiter.
func NewHandler(a *app.App) (http.Handler, error) {
	opts := []ginlimit.Option{
		ginlimit.WithErrorHandler(func(c *gin.Context, err error) {
			a.LimiterError(c.FullPath(), err)
		}),
	}
	auth, limit := authenticate(a.Auth), ginlimit.Middleware(a.Gate, opts...)

	r := gin.New()
	r.Use(gin.Recovery())
	if err := r.SetTrustedProxies(nil); err != nil {
		return nil, err
	}
	r.GET(app.PathHealth, func(c *gin.Context) { c.JSON(http.StatusOK, app.Health{Status: "ok"}) })
	r.GET(app.PathMetrics, gin.WrapH(a.Metrics))
	r.GET(app.PathProfile, auth, limit, func(c *gin.Context) {
		t, _ := gate.TenantFromContext(c.Request.Context())
		c.JSON(http.StatusOK, a.GetProfile(t))
	})
	r.GET(app.PathReports, auth, limit, func(c *gin.Context) {
		t, _ := gate.TenantFromContext(c.Request.Context())
		c.JSON(http.StatusOK, a.ListReports(c.Request.Context(), t))
	})
	r.POST(app.PathExport, auth, limit, func(c *gin.Context) {
		t, _ := gate.TenantFromContext(c.Request.Context())
		c.JSON(http.StatusOK, a.ExportReport(t))
	})
	r.POST(app.PathComplete, auth, limit, func(c *gin.Context) {
		c.Data(a.Complete(c.Request.Context(), c.Request.Body))
	})
	return r, nil
}

// authenticate verifies the bearer token and stores the tenant with
// gate.ContextWithTenant, or answers 401.
func authenticate(v *app.Verifier) gin.HandlerFunc {
	return func(c *gin.Context) {
		t, err := v.Authenticate(c.GetHeader("Authorization"))
		if err != nil {
			status, contentType, body := app.Unauthorized(err)
			c.Header("WWW-Authenticate", app.WWWAuthenticate)
			c.Abort()
			c.Data(status, contentType, body)
			return
		}
		c.Request = c.Request.WithContext(gate.ContextWithTenant(c.Request.Context(), t))
		c.Next()
	}
}
