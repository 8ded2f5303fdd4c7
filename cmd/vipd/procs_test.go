package main

import (
	"runtime"
	"testing"
)

// TestLimitProcs: one P unless GOMAXPROCS is set, in which case the
// runtime's value (from the environment) stands.
func TestLimitProcs(t *testing.T) {
	orig := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(orig) })

	runtime.GOMAXPROCS(3)
	if got := limitProcs(func(string) string { return "" }); got != 1 || runtime.GOMAXPROCS(0) != 1 {
		t.Errorf("GOMAXPROCS unset: limitProcs %d, runtime %d; want 1", got, runtime.GOMAXPROCS(0))
	}
	runtime.GOMAXPROCS(3)
	env := func(k string) string {
		if k == "GOMAXPROCS" {
			return "3"
		}
		return ""
	}
	if got := limitProcs(env); got != 3 || runtime.GOMAXPROCS(0) != 3 {
		t.Errorf("GOMAXPROCS=3: limitProcs %d, runtime %d; want 3", got, runtime.GOMAXPROCS(0))
	}
}
