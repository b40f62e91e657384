package main

import (
	"slices"
	"testing"
)

func TestDensityRuntimes(t *testing.T) {
	if got := densityRuntimes("", "crun"); !slices.Equal(got, []string{"crun", "runc", "runsc"}) {
		t.Errorf("default runtimes %v", got)
	}
	if got := densityRuntimes("", "runc"); !slices.Equal(got, []string{"runc", "runsc"}) {
		t.Errorf("default runtimes with runc the default %v", got)
	}
	if got := densityRuntimes(" runsc, runc,,runsc", "crun"); !slices.Equal(got, []string{"runsc", "runc"}) {
		t.Errorf("listed runtimes %v", got)
	}
}
