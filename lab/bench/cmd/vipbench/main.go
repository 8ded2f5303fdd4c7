// Command vipbench runs the vipd benchmarks in network namespaces and
// renders their report.
//
//	vipbench run [-runs 5] [-scenarios handoff,crash,...] [-systems vipd,keepalived]
//	             [-parts failover,bgp,footprint,scale,coldstart,upgrade,k8s] [-k8s-scenarios handoff,...] [-k8s-runs 3]
//	             [-bin bin] -out results.json
//	vipbench report -results results.json [-gobench file] [-kubeclient file] [-command "make bench"]
//	             -md docs/benchmarks.md -svg docs/benchmarks.svg
//
// run needs root and VIPD_NETNS_TESTS=1 (lab/bench.sh sets it).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/vipd/vipd/lab/bench"
	"github.com/vipd/vipd/lab/k8slab"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = run(os.Args[2:])
	case "report":
		err = report(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vipbench:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: vipbench run|report [flags] (see -h of each)")
	os.Exit(2)
}

func list(s string, all []string) ([]string, error) {
	if s == "" || s == "all" {
		return all, nil
	}
	var out []string
	for _, x := range strings.Split(s, ",") {
		x = strings.TrimSpace(x)
		found := false
		for _, a := range all {
			found = found || a == x
		}
		if !found {
			return nil, fmt.Errorf("unknown %q, want one of %s", x, strings.Join(all, ","))
		}
		out = append(out, x)
	}
	return out, nil
}

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	runs := fs.Int("runs", 5, "trials per scenario")
	scenarios := fs.String("scenarios", "all", "failover scenarios: "+strings.Join(bench.AllScenarios(), ","))
	systems := fs.String("systems", "all", "systems compared: "+strings.Join(bench.Systems, ","))
	parts := fs.String("parts", "all", "parts: "+strings.Join(bench.Parts, ","))
	bin := fs.String("bin", "bin", "directory holding vipd and vipctl")
	out := fs.String("out", "", "write the results (JSON) here (required)")
	logs := fs.String("logs", "", "copy every lab's daemon logs under this directory")
	k8sScenarios := fs.String("k8s-scenarios", "all", "Kubernetes clients scenarios: "+strings.Join(k8slab.Scenarios, ","))
	k8sRuns := fs.Int("k8s-runs", 3, "trials per Kubernetes clients scenario and system")
	fs.Parse(args)
	if *out == "" || *runs < 1 {
		return fmt.Errorf("run: -out is required and -runs must be at least 1")
	}
	c := bench.Config{Runs: *runs, Log: os.Stderr, LogDir: *logs, K8sRuns: *k8sRuns}
	var err error
	if c.Scenarios, err = list(*scenarios, bench.AllScenarios()); err != nil {
		return err
	}
	if c.Systems, err = list(*systems, bench.Systems); err != nil {
		return err
	}
	if c.Parts, err = list(*parts, bench.Parts); err != nil {
		return err
	}
	if c.K8sScenarios, err = list(*k8sScenarios, k8slab.Scenarios); err != nil {
		return err
	}
	if c.BinDir, err = filepath.Abs(*bin); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := bench.Run(ctx, c)
	return r.Save(*out)
}

func report(args []string) error {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	results := fs.String("results", "", "results written by vipbench run (required)")
	gobench := fs.String("gobench", "", "output of go test -bench to include")
	kubeclient := fs.String("kubeclient", "", "lab/kubeclient.sh's JSON to include (merged into the results file)")
	command := fs.String("command", "make bench", "the command that produced the results, for the report")
	md := fs.String("md", "docs/benchmarks.md", "markdown report to write")
	svg := fs.String("svg", "docs/benchmarks.svg", "SVG chart to write")
	fs.Parse(args)
	if *results == "" {
		return fmt.Errorf("report: -results is required")
	}
	r, err := bench.Load(*results)
	if err != nil {
		return err
	}
	if *kubeclient != "" {
		if r.KubeClient, err = bench.LoadKubeClient(*kubeclient); err != nil {
			return err
		}
		if err := r.Save(*results); err != nil {
			return err
		}
	}
	var gb string
	if *gobench != "" {
		b, err := os.ReadFile(*gobench)
		if err != nil {
			return err
		}
		gb = string(b)
	}
	m := r.MeasuredOn()
	if err := os.WriteFile(*svg, []byte(bench.Chart(r)), 0o644); err != nil {
		return err
	}
	doc := bench.Markdown(r, m, bench.ParseGoBench(gb), *command, filepath.Base(*svg))
	return os.WriteFile(*md, []byte(doc), 0o644)
}
