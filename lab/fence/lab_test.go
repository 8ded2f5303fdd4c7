package fence

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

const (
	// probeInterval is the client's probe interval; sampleEvery the holder
	// sampling interval.
	probeInterval = 20 * time.Millisecond
	sampleEvery   = 10 * time.Millisecond
	// healthURL is what every node's vipd checks: its own lab httpd.
	healthURL = "http://127.0.0.1:6443/readyz"
)

// options are vipd's defaults as far as the lab allows: failure_detection
// "fast", a health check on the lab httpd at the default interval, rise
// and fall; rejoin_interval 5 s (30 s by default) only so a member taken
// for dead rejoins quickly after a heal.
func options() netlab.VipdOptions {
	return netlab.VipdOptions{VIPs: []netlab.VIP{{Name: "apiserver", Address: netlab.VIP4, HealthURL: healthURL}}}
}

// spec is every fence test's cluster: 3 nodes with the client namespace,
// the lab httpd and vipd (options()) on each. Convergence after start and
// after every heal gets 20 s: a member memberlist took for dead comes back
// through the rejoin loop, every netlab.RejoinInterval.
func spec() netlab.Spec {
	return netlab.Spec{Options: netlab.Options{Settle: 20 * time.Second}, HTTP: true, Vipd: options()}
}

// runsFromEnv is VIPD_FENCE_RUNS (2 when unset: make test stays within CI's
// 20 minutes; `make fence-proof` runs 20).
func runsFromEnv(t *testing.T) int {
	t.Helper()
	s := os.Getenv("VIPD_FENCE_RUNS")
	if s == "" {
		return 2
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("VIPD_FENCE_RUNS=%q: want a positive number", s)
	}
	return n
}

// median of ds (the mean of the middle two for an even count; 0 for none).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// onlyHolder reports whether every sample saw exactly name holding, and
// describes the first one that did not.
func onlyHolder(ss netlab.HolderSamples, name string) (bool, string) {
	for _, s := range ss {
		if len(s.Holders) != 1 || s.Holders[0] != name {
			return false, fmt.Sprintf("%s holders %v", s.At.Format("15:04:05.000"), s.Holders)
		}
	}
	return true, ""
}

// multi returns the samples that saw two or more holders.
func multi(ss netlab.HolderSamples) netlab.HolderSamples {
	return ss.Where(func(s netlab.HolderSample) bool { return len(s.Holders) >= 2 })
}

// ms formats d in whole milliseconds.
func ms(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
}
