package main

import "testing"

func TestFirstOverIsTheFirstAdmissionAboveTheBound(t *testing.T) {
	// capacity 100, 20/s: by t = 1 s at most 120 admitted
	a := accuracy{config: "tollgate"}
	for range 120 {
		a.times = append(a.times, 0.5)
	}
	if i := a.firstOver(); i != 110 {
		t.Fatalf("firstOver = %d, want 110 (the 111th admission at 0.5 s, bound 110)", i)
	}
	a.times = a.times[:110]
	if i := a.firstOver(); i != -1 {
		t.Fatalf("firstOver = %d for 110 admissions by 0.5 s, want -1", i)
	}
	a.times = append(a.times, 1.0)
	if i := a.firstOver(); i != -1 {
		t.Fatalf("firstOver = %d for the 111th at 1 s (bound 120), want -1", i)
	}
}

func TestOnlyLeasesOvershoot(t *testing.T) {
	if o := (accuracy{config: "tollgate-leases"}).overshoot(); o != float64(*flagReplicas*leaseSize) {
		t.Fatalf("tollgate-leases overshoot %v, want replicas x lease size = %d", o, *flagReplicas*leaseSize)
	}
	for _, c := range []string{"tollgate", "redis_rate", "ulule"} {
		if o := (accuracy{config: c}).overshoot(); o != 0 {
			t.Errorf("%s overshoot %v, want 0", c, o)
		}
	}
	if limits("none") || limits("one-get") || !limits("tollgate-leases") {
		t.Fatal("limits: none and one-get decide nothing; the others do")
	}
}
