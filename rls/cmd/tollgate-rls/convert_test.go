package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/core/quota"
)

// TestConvertClassNamesYAMLReads: a class whose name YAML reads as
// something other than a string (null, a boolean, a number) is still
// that class in the converted file, which loads.
func TestConvertClassNamesYAMLReads(t *testing.T) {
	for _, name := range []string{"null", "Null", "NULL", "true", "False", "yes", "no", "on", "off", "y", "n", "1", "1.5", "0x1F", "1e3", ".inf", ".nan", "0o17", "1_000", "-1"} {
		if quota.ValidateName(name) != nil {
			continue // not a class name tollgate accepts: never written
		}
		in := fmt.Sprintf("domain: edge\ndescriptors:\n  - key: tenant\n    descriptors:\n      - {key: class, value: %q, rate_limit: {unit: second, requests_per_unit: 7}}\n", name)
		var out, errs bytes.Buffer
		if code := convertMain(nil, strings.NewReader(in), &out, &errs); code != 0 {
			t.Errorf("class %q: exit %d, want 0\n%s", name, code, errs.String())
			continue
		}
		cfg, err := config.Parse("converted", out.Bytes())
		if err != nil {
			t.Errorf("class %q: the converted file does not load: %v\n%s", name, err, out.String())
			continue
		}
		if q, ok := cfg.Tiers.Tiers["free"].Classes[name]; !ok || q.Capacity != 7 {
			t.Errorf("class %q: converted classes %+v", name, cfg.Tiers.Tiers["free"].Classes)
		}
	}
}

// TestConvertRateReadable: a rate whose decimal is long is written with
// the window it came from beside it, and loads as exactly that rate.
func TestConvertRateReadable(t *testing.T) {
	in := "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 2}\n    descriptors:\n      - {key: class, value: export, rate_limit: {unit: hour, requests_per_unit: 5, unit_multiplier: 2}}\n"
	var out, errs bytes.Buffer
	if code := convertMain(nil, strings.NewReader(in), &out, &errs); code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, errs.String())
	}
	for _, want := range []string{
		`"default": {capacity: 2, refill_per_second: 0.03333333333333333} # 2 per minute` + "\n",
		`"export": {capacity: 5, refill_per_second: 0.0006944444444444445} # 5 per 2 hours` + "\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	cfg, err := config.Parse("converted", out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Tiers.Tiers["free"].Classes["default"].RefillPerSecond; got != 2.0/60 {
		t.Errorf("default refills %v per second, want 2/60", got)
	}
}

// convert reads the YAML tollgate-rls serves (rlconfig's types): its
// tollgate block is known, named and left out; a count the reference
// cannot hold (requests_per_unit is a uint32) is bad input, as RLS_CONFIG
// refuses it.
func TestConvertReadsTheServedYAML(t *testing.T) {
	var errs bytes.Buffer
	in := "domain: x\ndescriptors:\n  - key: tier\n    value: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n  - key: user\n    tollgate: {tenant: user}\n"
	if code := convertMain(nil, strings.NewReader(in), io.Discard, &errs); code != 1 || !strings.Contains(errs.String(), "x/user: the tollgate block") {
		t.Errorf("a tollgate block: exit %d, %q; want 1 with it named", code, errs.String())
	}
	errs.Reset()
	in = "domain: x\ndescriptors:\n  - key: tier\n    value: a\n    rate_limit: {unit: second, requests_per_unit: -5}\n"
	if code := convertMain(nil, strings.NewReader(in), io.Discard, &errs); code != 2 || !strings.Contains(errs.String(), "line 5") {
		t.Errorf("a negative count: exit %d, %q; want 2 naming its line", code, errs.String())
	}
}
