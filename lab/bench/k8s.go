package bench

import (
	"context"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/vipd/vipd/lab/k8slab"
	"github.com/vipd/vipd/lab/netlab"
)

// k8sCheck is keepalived's tracked script in the Kubernetes lab: the same
// check as vipd's documented one (the local apiserver's /readyz, verified
// against the cluster CA and the name "kubernetes"), as docs/bootstrap.md
// writes it for a command check.
func k8sCheck(ca string) string {
	return fmt.Sprintf("/usr/bin/curl -sf -o /dev/null -m 1 --cacert %s --resolve kubernetes:%d:127.0.0.1 https://kubernetes:%d/readyz",
		ca, k8slab.APIServerPort, k8slab.APIServerPort)
}

// keepalivedAgent is keepalived as a k8slab.Agent.
type keepalivedAgent struct{ s *keepalivedSystem }

func (a keepalivedAgent) Name() string                 { return "keepalived" }
func (a keepalivedAgent) Start(h *netlab.Host) error   { return a.s.start(h) }
func (a keepalivedAgent) Crash(h *netlab.Host) error   { return a.s.crash(h) }
func (a keepalivedAgent) Steady() (bool, string)       { return a.s.steady() }
func (a keepalivedAgent) Handoff(h *netlab.Host) error { return a.s.handoff(h) }

// Unhandoff starts keepalived again after Handoff's SIGTERM.
func (a keepalivedAgent) Unhandoff(h *netlab.Host) error { return a.s.start(h) }

// Stop is SIGTERM: the master sends priority 0 and releases the VIP.
func (a keepalivedAgent) Stop(h *netlab.Host) error {
	p, err := a.s.proc(h)
	if err != nil {
		return err
	}
	return p.Stop(syscall.SIGTERM, 10*time.Second)
}

// Rejoined waits until every keepalived runs and none has logged a state
// change for a while (steady).
func (a keepalivedAgent) Rejoined(h *netlab.Host) error {
	ok, detail := netlab.Eventually(60*time.Second, 100*time.Millisecond, a.s.steady)
	if !ok {
		return fmt.Errorf("keepalived not steady after restarting on %s: %s", h.Name, detail)
	}
	return nil
}

// k8sBench runs every Kubernetes clients scenario runs times per system,
// each system in a lab of its own with the real control plane.
func k8sBench(ctx context.Context, c Config, r *Results, logf func(string, ...any)) {
	for _, name := range Systems {
		if !has(c.Systems, name) || ctx.Err() != nil {
			continue
		}
		logf("k8s: %s, scenarios %v, %d runs each", name, c.K8sScenarios, c.K8sRuns)
		err := Do(ctx, "k8s-"+name, c.Log, func(t *T) {
			l := netlab.New(t, netlab.Options{Nodes: 3})
			keepLogs(t, l, c.LogDir, "k8s-"+name)
			cp := k8slab.Start(t, l)
			var a k8slab.Agent
			switch name {
			case "vipd":
				va := cp.NewVipd(netlab.VipdOptions{RejoinInterval: "2s", LogLevel: "info"})
				if err := va.StartAll(); err != nil {
					t.Fatalf("%v", err)
				}
				a = va
			case "keepalived":
				ks := &keepalivedSystem{l: l, check: k8sCheck(cp.PKI.CACert), ps: map[string]*netlab.Proc{}}
				for _, n := range l.Nodes {
					if err := ks.start(n); err != nil {
						t.Fatalf("%v", err)
					}
				}
				a = keepalivedAgent{ks}
			}
			for _, sc := range c.K8sScenarios {
				for run := 1; run <= c.K8sRuns && ctx.Err() == nil; run++ {
					tr := cp.RunTrial(a, sc, run, func(f string, args ...any) { t.Logf(f, args...) })
					r.K8s = append(r.K8s, tr)
					fmt.Fprintf(c.Log, "%s %-10s k8s %-9s run %d: %s\n", time.Now().Format("15:04:05"), name, sc, run, k8sLine(tr))
				}
			}
		})
		if err != nil {
			r.Errors = append(r.Errors, err.Error())
		}
	}
}

// k8sLine is a trial's progress line.
func k8sLine(tr k8slab.Trial) string {
	c := tr.Clients
	s := fmt.Sprintf("%s->%s moves %d; %d of %d requests failed %v, longest %v; stall %v (%s; %d over %v), delivering %v, back %v, relists %d",
		tr.From, tr.To, tr.Moves, c.Failed, c.Requests, c.FailedBy, c.LongestRequest.Round(time.Millisecond),
		c.Stall.Round(time.Millisecond), c.StallWatch, c.Stalled, k8slab.LagLimit, c.Delivering.Round(time.Millisecond), c.Back.Round(time.Millisecond), c.Relists)
	if tr.Err != "" {
		s = "ERROR " + tr.Err + "; " + s
	}
	return s
}

// k8sTrials returns the completed Kubernetes trials of system and
// scenario, and how many did not complete.
func (r *Results) k8sTrials(system, scenario string) (ok []k8slab.Trial, failed int) {
	return completed(r.K8s, func(t k8slab.Trial) bool { return t.Agent == system && t.Scenario == scenario },
		func(t k8slab.Trial) string { return t.Err })
}

// count formats min / median / max of a count.
func count(s Stats) string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%d / %d / %d", int64(s.Min), int64(s.Median), int64(s.Max))
}

// k8sTargets are the targets for the clients.
func (r *Results) k8sTargets() []Target {
	var ts []Target
	for _, sc := range k8slab.Scenarios {
		v, _ := r.k8sTrials("vipd", sc)
		if !k8slab.Planned[sc] {
			continue
		}
		goal := fmt.Sprintf("Kubernetes clients, %s: 0 failed requests, every watch delivering again within 1 s (vipd)", sc)
		if len(v) == 0 {
			ts = append(ts, Target{Goal: goal, Measured: "not measured", Unknown: true})
			continue
		}
		failed := stat(v, func(t k8slab.Trial) time.Duration { return time.Duration(t.Clients.Failed) })
		stall := stat(v, func(t k8slab.Trial) time.Duration { return t.Clients.Stall })
		deliv := stat(v, func(t k8slab.Trial) time.Duration { return t.Clients.Delivering })
		ts = append(ts, Target{Goal: goal,
			Measured: fmt.Sprintf("at most %d failed, longest stall %s ms, every watch delivering after at most %s ms, %d runs", int64(failed.Max), ms(stall.Max), ms(deliv.Max), len(v)),
			Met:      failed.Max == 0 && stall.Max <= time.Second && deliv.Max <= time.Second})
	}
	for _, sc := range k8slab.Scenarios {
		if !k8slab.Lost[sc] {
			continue
		}
		v, _ := r.k8sTrials("vipd", sc)
		goal := fmt.Sprintf("Kubernetes clients, %s: every watch delivering events again within 2 s of the event, median (vipd, [connections] default)", sc)
		if len(v) == 0 {
			ts = append(ts, Target{Goal: goal, Measured: "not measured", Unknown: true})
			continue
		}
		d := stat(v, func(t k8slab.Trial) time.Duration { return t.Clients.Delivering })
		measured := fmt.Sprintf("median %s ms, max %s ms, %d runs", ms(d.Median), ms(d.Max), len(v))
		if k, _ := r.k8sTrials("keepalived", sc); len(k) > 0 {
			measured += fmt.Sprintf("; keepalived median %s ms", ms(stat(k, func(t k8slab.Trial) time.Duration { return t.Clients.Delivering }).Median))
		}
		ts = append(ts, Target{Goal: goal, Measured: measured, Met: d.Median <= 2*time.Second})
	}
	for _, sc := range k8slab.Scenarios {
		if k8slab.Planned[sc] {
			continue
		}
		v, _ := r.k8sTrials("vipd", sc)
		k, _ := r.k8sTrials("keepalived", sc)
		goal := fmt.Sprintf("Kubernetes clients, %s: median watch stall below keepalived's", sc)
		if len(v) == 0 || len(k) == 0 {
			ts = append(ts, Target{Goal: goal, Measured: "not measured", Unknown: true})
			continue
		}
		sv := stat(v, func(t k8slab.Trial) time.Duration { return t.Clients.Stall })
		sk := stat(k, func(t k8slab.Trial) time.Duration { return t.Clients.Stall })
		ts = append(ts, Target{Goal: goal, Measured: fmt.Sprintf("vipd %s ms, keepalived %s ms", ms(sv.Median), ms(sk.Median)), Met: sv.Median < sk.Median})
	}
	return ts
}

// writeK8s renders the "Kubernetes clients" section.
func writeK8s(w io.Writer, r *Results, command string) {
	if len(r.K8s) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Kubernetes clients: vipd vs keepalived\n\n")
	if r.K8sSource != "" {
		p("Not from the run above: %s. ", r.K8sSource)
	} else {
		p("`%s` (part `k8s`; `PARTS=k8s K8S_RUNS=1 make bench` runs only it). ", command)
	}
	p("A real control plane per lab (lab/k8slab): on each of three nodes an etcd member (one cluster) and kube-apiserver %s, kubeadm-shaped PKI, Node,RBAC; ", "v1.37.2")
	p("the clients (lab/k8s/cmd/clients, client-go v0.37.2 with its defaults) in the client namespace through the VIP: ")
	p("a writer creating a ConfigMap every 100 ms; 20 informers on them, 8 on connections of their own and 3 kubelet-like groups of 4 sharing one HTTP/2 connection per node identity, which also renews its node Lease every 10 s as a kubelet does; ")
	p("a kubectl-like loop (a fresh client and connection per request) and a long-lived client's loop, a GET every 200 ms each; every request bounded by 10 s. ")
	p("vipd runs the documented health check (`%s`, `ca_file`, `tls_server_name = \"kubernetes\"`, default interval, timeout, rise, fall); keepalived the same check with curl (`vrrp_script` every 1 s, fall 3, rise 2), priorities 150/100/50, preempting.\n\n", k8slab.HealthURL)
	p("Each trial: the lab steady, the clients live, the event on the VIP's holder, every watch back, the heal (agent started again, link up, ...), the lab steady again, every watch back again, 3 s more; the figures cover all of it from the event on. ")
	if lo, hi := r.k8sRuns(); lo == hi {
		p("Runs per scenario and system: %d. Min / median / max.\n\n", hi)
	} else {
		p("Runs per scenario and system: %d to %d (the runs column). Min / median / max.\n\n", lo, hi)
	}
	p("- **failed requests**: creates and gets that returned an error (or hit the 10 s bound).\n")
	p("- **watch stall**: the longest time any informer delivered nothing while an object it had not delivered yet existed (ms).\n")
	p("- **stalled**: informers (of 20) whose stall was over %v.\n", k8slab.LagLimit)
	p("- **delivering**: event until every informer had delivered an object created after the event: each watch delivering events again, the VIP's move and the writer's own recovery included (ms).\n")
	p("- **all back**: event to the last delivery that came more than %v after its object existed: from then on every informer kept up (ms; 0: none was ever that far behind).\n", k8slab.LagLimit)
	p("- **longest request**: the slowest create or get (ms). **relists**: informer lists after the event. **moves**: changes of the VIP's holder.\n\n")
	p("| scenario | system | runs | failed requests | watch stall | stalled | delivering | all back | longest request | relists | moves |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, sc := range k8slab.Scenarios {
		for _, sys := range Systems {
			ts, failed := r.k8sTrials(sys, sc)
			if len(ts) == 0 && failed == 0 {
				continue
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", sc, sys, runsCell(len(ts), failed),
				count(stat(ts, func(t k8slab.Trial) time.Duration { return time.Duration(t.Clients.Failed) })),
				mmm(stat(ts, func(t k8slab.Trial) time.Duration { return t.Clients.Stall })),
				count(stat(ts, func(t k8slab.Trial) time.Duration { return time.Duration(t.Clients.Stalled) })),
				mmm(stat(ts, func(t k8slab.Trial) time.Duration { return t.Clients.Delivering })),
				mmm(stat(ts, func(t k8slab.Trial) time.Duration { return t.Clients.Back })),
				mmm(stat(ts, func(t k8slab.Trial) time.Duration { return t.Clients.LongestRequest })),
				count(stat(ts, func(t k8slab.Trial) time.Duration { return time.Duration(t.Clients.Relists) })),
				count(stat(ts, func(t k8slab.Trial) time.Duration { return time.Duration(t.Moves) })))
		}
	}
	p("\nScenarios:\n\n")
	for _, sc := range k8slab.Scenarios {
		p("- `%s`: %s.\n", sc, k8slab.ScenarioTitle[sc])
	}
	p("\nFirst failed request per trial (vipd):\n\n")
	n := 0
	for _, t := range r.K8s {
		if t.Agent == "vipd" && t.Clients.FirstError != "" {
			p("- %s run %d (%v): %s\n", t.Scenario, t.Run, t.Clients.FailedBy, t.Clients.FirstError)
			n++
		}
	}
	if n == 0 {
		p("- none\n")
	}
	p("\nTrials that did not complete:\n\n")
	n = 0
	for _, t := range r.K8s {
		if t.Err != "" {
			p("- %s %s run %d: %s\n", t.Agent, t.Scenario, t.Run, t.Err)
			n++
		}
	}
	if n == 0 {
		p("- none\n")
	}
	p("\n")
}

// k8sRuns is the fewest and the most trials of one scenario and system.
func (r *Results) k8sRuns() (lo, hi int) {
	n := map[[2]string]int{}
	for _, t := range r.K8s {
		n[[2]string{t.Agent, t.Scenario}]++
	}
	for _, c := range n {
		if lo == 0 || c < lo {
			lo = c
		}
		hi = max(hi, c)
	}
	return lo, hi
}
