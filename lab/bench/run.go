package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// Config selects what Run measures.
type Config struct {
	// Runs per scenario (and per BGP scenario, and READY samples).
	Runs int
	// Scenarios of the failover part (a subset of AllScenarios()).
	Scenarios []string
	// Systems of the failover part (a subset of Systems).
	Systems []string
	// Parts to run (a subset of Parts).
	Parts []string
	// K8sScenarios are the Kubernetes clients scenarios (a subset of
	// k8slab.Scenarios), K8sRuns the trials of each per system.
	K8sScenarios []string
	K8sRuns      int
	// BinDir holds vipd and vipctl (sizes are taken from there).
	BinDir string
	// Log receives progress lines.
	Log io.Writer
	// LogDir, when set, receives a copy of every lab's daemon logs
	// (LogDir/<lab>/<node>/*.log) before the lab is removed.
	LogDir string
}

// Parts are the parts of a run, in order.
var Parts = []string{"failover", "bgp", "footprint", "scale", "coldstart", "upgrade", "k8s"}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Run measures what c selects. A part that cannot run is recorded in
// Results.Errors and the others still run.
func Run(ctx context.Context, c Config) *Results {
	m := ThisMachine()
	r := &Results{Started: time.Now().UTC(), Runs: c.Runs, LoadBefore: loadAvg(), Vipd: "unknown", Machine: &m}
	if out, err := exec.Command(filepath.Join(c.BinDir, "vipd"), "--version").Output(); err == nil {
		r.Vipd = strings.TrimSpace(string(out))
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(c.Log, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	if has(c.Parts, "failover") {
		for _, name := range Systems {
			if !has(c.Systems, name) || ctx.Err() != nil {
				continue
			}
			logf("failover: %s, scenarios %v, %d runs each", name, c.Scenarios, c.Runs)
			err := Do(ctx, "failover-"+name, c.Log, func(t *T) {
				l := netlab.New(t, netlab.Options{Nodes: 3})
				keepLogs(t, l, c.LogDir, "failover-"+name)
				l.StartHTTPAll()
				var sys system
				switch name {
				case "vipd":
					vs := &vipdSystem{l: l, o: vipdOptions()}
					l.StartVipds(vs.o)
					sys = vs
				case "keepalived":
					ks := &keepalivedSystem{l: l, ps: map[string]*netlab.Proc{}}
					for _, n := range l.Nodes {
						if err := ks.start(n); err != nil {
							t.Fatalf("%v", err)
						}
					}
					sys = ks
				}
				trials, stress := failover(ctx, l, sys, c.Scenarios, c.Runs, c.Log)
				r.Failover = append(r.Failover, trials...)
				r.Stress = append(r.Stress, stress...)
			})
			if err != nil {
				r.Errors = append(r.Errors, err.Error())
			}
		}
	}
	if has(c.Parts, "bgp") && ctx.Err() == nil {
		logf("bgp: %v, %d runs each", BGPScenarios, c.Runs)
		err := Do(ctx, "bgp", c.Log, func(t *T) { r.BGP = bgpBench(t, c.Runs, c.Log, c.LogDir) })
		if err != nil {
			r.Errors = append(r.Errors, err.Error())
		}
	}
	if has(c.Parts, "footprint") && ctx.Err() == nil {
		logf("footprint")
		fp := &Footprint{}
		err := Do(ctx, "footprint", c.Log, func(t *T) { footprint(t, fp, c) })
		if err != nil {
			fp.Errors = append(fp.Errors, err.Error())
		}
		r.Footprint = fp
	}
	if has(c.Parts, "scale") && ctx.Err() == nil {
		logf("scale: 16 nodes, 100 VIPs, %d runs", c.Runs)
		sc := &Scale{Nodes: scaleNodes, VIPs: scaleVIPs}
		for run := 1; run <= c.Runs && ctx.Err() == nil; run++ {
			err := Do(ctx, fmt.Sprintf("scale-%d", run), c.Log, func(t *T) { scale(t, sc, run, c.Log, c.LogDir) })
			if err != nil {
				sc.Errors = append(sc.Errors, fmt.Sprintf("run %d: %v", run, err))
			}
		}
		r.Scale = sc
	}
	if has(c.Parts, "coldstart") && ctx.Err() == nil {
		logf("coldstart: %v nodes, first apiserver ready %v after the start, %d runs each", ColdSizes, ColdDelays, c.Runs)
		for _, n := range ColdSizes {
			if ctx.Err() != nil {
				break
			}
			// One lab per size, each under a name of its own (the name
			// makes the lab's namespace prefix).
			err := Do(ctx, fmt.Sprintf("coldstart-%d", n), c.Log, func(t *T) {
				r.ColdStart = append(r.ColdStart, coldStart(t, n, c.Runs, c.Log, c.LogDir)...)
			})
			if err != nil {
				r.Errors = append(r.Errors, err.Error())
			}
		}
	}
	if has(c.Parts, "upgrade") && ctx.Err() == nil {
		logf("upgrade: lab/upgrade's TestRollingUpgrade, %d runs", c.Runs)
		upgradeBench(ctx, c, r, logf)
	}
	if has(c.Parts, "k8s") && ctx.Err() == nil {
		k8sBench(ctx, c, r, logf)
	}
	if ctx.Err() != nil {
		r.Errors = append(r.Errors, "interrupted: "+ctx.Err().Error())
	}
	r.Finished = time.Now().UTC()
	r.LoadAfter = loadAvg()
	return r
}

// loadAvg returns the first three fields of /proc/loadavg ("" if
// unreadable): other work on the machine skews the timings.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// keepLogs copies the lab's log files to dir/name when the lab is torn
// down (dir "" keeps nothing).
func keepLogs(t *T, l *netlab.Lab, dir, name string) {
	if dir == "" {
		return
	}
	t.Cleanup(func() {
		hosts := append([]*netlab.Host(nil), l.Nodes...)
		if l.Client != nil {
			hosts = append(hosts, l.Client)
		}
		for _, h := range hosts {
			logs, _ := filepath.Glob(filepath.Join(h.Dir, "*.log"))
			more, _ := filepath.Glob(filepath.Join(h.Dir, "*", "*.log"))
			for _, src := range append(logs, more...) {
				rel, err := filepath.Rel(l.Dir, src)
				if err != nil {
					continue
				}
				dst := filepath.Join(dir, name, rel)
				b, err := os.ReadFile(src)
				if err == nil && os.MkdirAll(filepath.Dir(dst), 0o755) == nil {
					os.WriteFile(dst, b, 0o644)
				}
			}
		}
	})
}
