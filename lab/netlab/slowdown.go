package netlab

import (
	"os"
	"strconv"
	"time"
)

// Slowdown is how many times slower than a real machine the lab's machine
// runs: VIPD_LAB_SLOWDOWN, which lab/vm sets for a VM whose CPU QEMU
// emulates (TCG), where everything, vipd, the probes and the kernel's
// timers included, runs several times slower; 1 otherwise. Bounds that
// measure the machine (a process answering after it starts, a client's
// probe timeout) and bounds of a lab that runs only there scale with it
// (Scaled); the product's own figures are checked on real machines, by
// the labs that run on the host.
func Slowdown() float64 {
	f, err := strconv.ParseFloat(os.Getenv("VIPD_LAB_SLOWDOWN"), 64)
	if err != nil || f < 1 {
		return 1
	}
	return f
}

// Scaled returns d times Slowdown.
func Scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * Slowdown()) }
