// Package bench measures vipd in network-namespace labs (lab/netlab) and
// compares it with keepalived in the same topology: client-observed
// failover gaps, split-brain time, BGP route withdrawal at a BIRD router,
// footprint and a 16-node scale run. It writes the measurements as JSON
// (Results) and renders them as docs/benchmarks.md with an SVG chart.
//
// Everything that touches the network needs root and runs only in
// namespaces the lab creates; `make bench` (lab/bench.sh) drives it through
// cmd/vipbench.
package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/vipd/vipd/lab/k8slab"
)

// Results is everything one `vipbench run` measured.
type Results struct {
	// Started and Finished bound the run.
	Started, Finished time.Time
	// LoadBefore and LoadAfter are /proc/loadavg's 1, 5 and 15 minute
	// load averages at the start and the end.
	LoadBefore, LoadAfter string
	// Vipd is `vipd --version` of the binary measured (a "-dirty" build
	// holds uncommitted changes of the tree it was built from).
	Vipd string
	// Machine is where the run ran (nil in results older than this
	// field: the report then describes the machine it is rendered on).
	Machine *Machine `json:",omitempty"`
	// Runs is the number of trials per scenario asked for.
	Runs int
	// Failover holds one entry per L2 failover and membership cut trial.
	Failover []Trial
	// Stress holds one entry per stress trial.
	Stress []StressTrial `json:",omitempty"`
	// BGP holds one entry per BGP trial.
	BGP []BGPTrial
	// Footprint of vipd (nil when not measured).
	Footprint *Footprint
	// Scale of the 16-node runs (nil when not measured).
	Scale *Scale
	// ColdStart trials (cold start of a whole cluster).
	ColdStart []ColdTrial `json:",omitempty"`
	// ColdStartSource names the run the cold-start trials come from when
	// it is not the report's own (as Scale.Source).
	ColdStartSource string `json:",omitempty"`
	// ScenarioSources names, for a failover scenario whose trials come
	// from another run than the report's own, that run.
	ScenarioSources map[string]string `json:",omitempty"`
	// K8s holds one entry per Kubernetes clients trial (lab/k8slab).
	K8s []k8slab.Trial `json:",omitempty"`
	// K8sSource names the run the Kubernetes clients trials come from
	// when it is not the report's own (as Scale.Source): its command,
	// vipd version and time.
	K8sSource string `json:",omitempty"`
	// Upgrade holds one entry per rolling-upgrade run (lab/upgrade).
	Upgrade []UpgradeTrial `json:",omitempty"`
	// UpgradeSource names the run the rolling-upgrade runs come from when
	// it is not the report's own (as Scale.Source): its command, vipd
	// version and time.
	UpgradeSource string `json:",omitempty"`
	// KubeClient compares the Kubernetes clients vipd's Node watch could
	// use (lab/kubeclient.sh; nil when not measured).
	KubeClient *KubeClient `json:",omitempty"`
	// Errors are labs or parts that could not run at all.
	Errors []string
}

// Trial is one failover measurement.
type Trial struct {
	// System is "vipd" or "keepalived".
	System string
	// Scenario is one of Scenarios.
	Scenario string
	// Run counts from 1.
	Run int
	// From is the owner before the event; To the node that served the
	// client next ("" when none did).
	From, To string
	// Gap is the client-observed unreachability: the longest run of failed
	// probes between the event and the heal, first failed probe to next
	// successful one.
	Gap time.Duration
	// Failed is the number of failed probes in that window.
	Failed int
	// Takeover is from the event to the first probe answered by another
	// node.
	Takeover time.Duration
	// Split is how long two or more nodes had the VIP on their interface
	// at once, over the whole trial (event, heal and settling).
	Split time.Duration
	// SplitAfterHeal is the part of Split after the heal.
	SplitAfterHeal time.Duration
	// Release and Claim (membership cut scenarios) are from the event to
	// the first holder sample without the owner, and to the first with
	// another node holding (0: not within the cut).
	Release, Claim time.Duration `json:",omitempty"`
	// Elected and Holding (vipd) are from the event to the first ownership
	// change away from the old owner logged by another node, and to the
	// new owner's "holding VIP" log line (0: not found). See breakdown.
	Elected, Holding time.Duration `json:",omitempty"`
	// FirstFailure is the error of the first failed probe in the window.
	FirstFailure string `json:",omitempty"`
	// Err is set when the trial did not complete; its figures are not used.
	Err string `json:",omitempty"`
}

// BGPTrial is one BGP measurement at the router and at the client.
type BGPTrial struct {
	// Scenario is one of BGPScenarios.
	Scenario string
	// Run counts from 1.
	Run int
	// From is the node the router forwarded to before the event.
	From string
	// RouteGone is from the event to the router no longer having a path
	// via From.
	RouteGone time.Duration
	// NewRoute is from the event to the router's best path being via
	// another node (0 when it never was within the bound).
	NewRoute time.Duration
	// ClientGap is the longest run of failed client probes after the
	// event (first failed probe to the next answered one), and Lost the
	// number of probes in it.
	ClientGap time.Duration
	Lost      int
	// Err is set when the trial did not complete.
	Err string `json:",omitempty"`
}

// Usage is one resource sample of a process over a window.
type Usage struct {
	// RSSKiB is the resident set size at the end of the window (the
	// largest over the nodes when several are sampled).
	RSSKiB int64
	// CPUPercent is CPU time used over the window divided by its length,
	// in percent of one core (the largest over the nodes).
	CPUPercent float64
	// Window is the length of the sampling window.
	Window time.Duration
}

// Footprint is vipd's resource use.
type Footprint struct {
	// Idle1, Churn1: 3 nodes, 1 VIP, idle and with withdraw/restore churn.
	Idle1, Churn1 Usage
	// Idle1LAN: 3 nodes, 1 VIP, idle, failure_detection "lan".
	Idle1LAN Usage
	// Idle100, Churn100: 3 nodes, 100 VIPs.
	Idle100, Churn100 Usage
	// VipdBytes and VipctlBytes are the sizes of bin/vipd and bin/vipctl.
	VipdBytes, VipctlBytes int64
	// Ready are the times from exec to READY=1 on $NOTIFY_SOCKET of a
	// node joining two running peers, one per run.
	Ready []time.Duration
	// Errors of parts that did not complete.
	Errors []string `json:",omitempty"`
}

// Scale is the 16-node, 100-VIP run.
type Scale struct {
	// Nodes and VIPs of the lab.
	Nodes, VIPs int
	// Start is from starting every vipd to every VIP being on exactly one
	// node, in the first run (the only one of older results).
	Start time.Duration
	// Starts is Start of every run, in run order.
	Starts []time.Duration `json:",omitempty"`
	// Leave is from SIGTERM to the node holding most VIPs to every VIP
	// being on exactly one of the remaining nodes, in the first run.
	Leave time.Duration
	// Leaves is Leave of every run.
	Leaves []time.Duration `json:",omitempty"`
	// Moved is the number of VIPs the leaving node held, in the first run.
	Moved int
	// Errors of parts that did not complete.
	Errors []string `json:",omitempty"`
	// Source names the run these numbers come from when it is not the
	// report's own (a scale part re-measured and spliced into a full
	// run's results): its command, vipd version and time. The report
	// says so in the section.
	Source string `json:",omitempty"`
}

// KubeClient is what lab/kubeclient.sh measured: cmd/vipd built without a
// Node watch, with nodewatch, and with client-go, each run idle on one node
// with one L2 VIP while a fake apiserver changes the Node every 2 s.
type KubeClient struct {
	// Source is the script's command, the vipd commit and the time.
	Source string
	// Seconds is how long each run was sampled.
	Seconds int
	// Variants, the one without a watch first.
	Variants []KubeClientVariant
}

// KubeClientVariant is one build of vipd in a KubeClient comparison.
type KubeClientVariant struct {
	Name string
	// Bytes is the size of the stripped binary; Modules the number of
	// modules it links (the main module included).
	Bytes, Modules int64
	// StartRSSKiB is the largest RSS of `vipd --version` (package
	// initialisation, no work done).
	StartRSSKiB int64
	// IdleRSSKiB and CPUPercent hold each run's largest RSS and CPU share.
	IdleRSSKiB []int64
	CPUPercent []float64
}

// LoadKubeClient reads lab/kubeclient.sh's JSON.
func LoadKubeClient(path string) (*KubeClient, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read kubeclient results: %w", err)
	}
	var k KubeClient
	if err := json.Unmarshal(b, &k); err != nil {
		return nil, fmt.Errorf("decode kubeclient results %s: %w", path, err)
	}
	if len(k.Variants) == 0 {
		return nil, fmt.Errorf("kubeclient results %s: no variants", path)
	}
	return &k, nil
}

// Save writes r as indented JSON.
func (r *Results) Save(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}

// Load reads results written by Save.
func Load(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decode results %s: %w", path, err)
	}
	return &r, nil
}

// Stats summarizes durations.
type Stats struct {
	// N is the number of values.
	N int
	// Min, Median and Max of the values (0 when N is 0). The median of an
	// even count is the mean of the two middle values.
	Min, Median, Max time.Duration
}

// Summarize returns the Stats of ds.
func Summarize(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stats{N: len(s), Min: s[0], Median: med, Max: s[len(s)-1]}
}
