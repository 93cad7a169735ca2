// Package chart tests the tollgate-rls Helm chart (charts/tollgate-rls) with
// the helm command: lint, and the objects it renders for the settings a
// deployment turns.
package chart

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	path, err := exec.LookPath("helm")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("helm is not on PATH (.ci/run installs it)")
		}
		t.Skip("helm is not on PATH: go install helm.sh/helm/v4/cmd/helm@v4.3.2")
	}
	chart, err := filepath.Abs("../../charts/tollgate-rls")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, append(args[:1:1], append([]string{chart}, args[1:]...)...)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err = cmd.Run()
	if err != nil {
		return out.String() + stderr.String(), err
	}
	return out.String(), nil
}

type object = map[string]any

func render(t *testing.T, set ...string) map[string]object {
	t.Helper()
	args := []string{"template", "--namespace", "gw", "--name-template", "rl"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", set, err, out)
	}
	objs := map[string]object{}
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var o object
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, out)
		}
		if o == nil {
			continue
		}
		objs[o["kind"].(string)] = o
	}
	return objs
}

// at follows a path of map keys and list indexes through an object.
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(object)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func env(dep object) map[string]any {
	got := map[string]any{}
	for _, e := range at(dep, "spec", "template", "spec", "containers", 0, "env").([]any) {
		m := e.(map[string]any)
		if v, ok := m["value"]; ok {
			got[m["name"].(string)] = v
		} else {
			got[m["name"].(string)] = m["valueFrom"]
		}
	}
	return got
}

func TestLint(t *testing.T) {
	if out, err := helm(t, "lint", "--strict", "--set", "redis.url=redis://redis:6379/0"); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
}

func TestDefaults(t *testing.T) {
	objs := render(t, "redis.url=redis:6379")
	for _, k := range []string{"Deployment", "Service", "ConfigMap", "Secret", "PodDisruptionBudget", "ServiceAccount"} {
		if objs[k] == nil {
			t.Errorf("no %s rendered", k)
		}
	}
	for _, k := range []string{"HorizontalPodAutoscaler", "ServiceMonitor"} {
		if objs[k] != nil {
			t.Errorf("%s rendered though not enabled", k)
		}
	}
	dep := objs["Deployment"]
	if p := at(dep, "spec", "template", "spec", "containers", 0, "readinessProbe", "httpGet", "path"); p != "/healthcheck" {
		t.Errorf("readiness probe path %v, want /healthcheck", p)
	}
	if p := at(dep, "spec", "template", "spec", "containers", 0, "livenessProbe", "grpc", "port"); p != 8081 {
		t.Errorf("liveness probe %v, want gRPC health on 8081", p)
	}
	e := env(dep)
	if e["GRPC_PORT"] != "8081" || e["PORT"] != "8080" || e["TOLLGATE_CONFIG"] != "/etc/tollgate/tollgate.yaml" {
		t.Errorf("env %v", e)
	}
	if ref := at(e["REDIS_URL"], "secretKeyRef", "name"); ref != "rl-tollgate-rls-redis" {
		t.Errorf("REDIS_URL from %v, want the chart's Secret", e["REDIS_URL"])
	}
	if at(objs["Secret"], "stringData", "REDIS_URL") != "redis:6379" {
		t.Errorf("Secret %v", objs["Secret"]["stringData"])
	}
	if _, ok := e["RLS_CONFIG"]; ok {
		t.Errorf("RLS_CONFIG set without rlsConfig")
	}
	// a folder mount: a subPath mount never sees the ConfigMap change
	m := at(dep, "spec", "template", "spec", "containers", 0, "volumeMounts", 0).(map[string]any)
	if m["mountPath"] != "/etc/tollgate" || m["subPath"] != nil {
		t.Errorf("config mount %v", m)
	}
	if !strings.Contains(at(objs["ConfigMap"], "data", "tollgate.yaml").(string), "default_tier: free") {
		t.Errorf("ConfigMap %v", objs["ConfigMap"]["data"])
	}
	if at(dep, "spec", "template", "spec", "securityContext", "runAsNonRoot") != true {
		t.Errorf("pod may run as root")
	}
}

func TestOptions(t *testing.T) {
	objs := render(t, "redis.existingSecret=redis-creds", "autoscaling.enabled=true", "serviceMonitor.enabled=true",
		"rlsConfig=domain: edge", "database.existingSecret=pg", "env.SHADOW_MODE=true")
	if objs["Secret"] != nil {
		t.Errorf("a Secret rendered beside existingSecret")
	}
	if objs["HorizontalPodAutoscaler"] == nil || objs["ServiceMonitor"] == nil {
		t.Errorf("HPA or ServiceMonitor missing")
	}
	dep := objs["Deployment"]
	if r := at(dep, "spec", "replicas"); r != nil {
		t.Errorf("replicas %v set beside the autoscaler, which then fight", r)
	}
	e := env(dep)
	if at(e["REDIS_URL"], "secretKeyRef", "name") != "redis-creds" || at(e["DATABASE_URL"], "secretKeyRef", "name") != "pg" {
		t.Errorf("secrets %v %v", e["REDIS_URL"], e["DATABASE_URL"])
	}
	if e["RLS_CONFIG"] != "/etc/tollgate/ratelimit.yaml" || e["SHADOW_MODE"] != "true" {
		t.Errorf("env %v", e)
	}
	if at(objs["ConfigMap"], "data", "ratelimit.yaml") != "domain: edge\n" {
		t.Errorf("ConfigMap %v", objs["ConfigMap"]["data"])
	}
}

func TestNoRedisIsRefused(t *testing.T) {
	out, err := helm(t, "template")
	if err == nil || !strings.Contains(out, "set redis.url") {
		t.Fatalf("rendered without a Redis (err %v):\n%s", err, out)
	}
}
