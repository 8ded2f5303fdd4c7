// Command burn keeps one CPU busy with a plain loop for a bounded time, to
// load the machine in labs that check vipd does not fail over for nothing
// on a saturated host. It exits by itself after -for (at most 10 minutes),
// or at once on SIGTERM/SIGINT/SIGKILL.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"
)

func main() {
	d := flag.Duration("for", 60*time.Second, "how long to burn (at most 10m)")
	flag.Parse()
	if *d <= 0 || *d > 10*time.Minute {
		fmt.Fprintln(os.Stderr, "burn: -for must be in (0, 10m]")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(1)
	deadline := time.Now().Add(*d)
	n := 0
	for time.Now().Before(deadline) {
		// A little work between clock reads; the loop never blocks.
		for i := 0; i < 1000; i++ {
			n += i
		}
	}
	if n == 42 {
		fmt.Println(n) // keeps the loop from being optimised away
	}
}
