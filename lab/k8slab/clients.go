package k8slab

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// Clients is a running clients tool (lab/k8s/cmd/clients) in the lab's
// client namespace, talking to the VIP.
type Clients struct {
	*netlab.Proc
	// Out is the file it writes its records to.
	Out string
}

// clientRuns numbers clients runs within the process, for their files and
// their objects' run label.
var clientRuns atomic.Int64

// StartClients starts the clients tool with its defaults (a writer every
// 100 ms, 8 informers on connections of their own, a kubelet-like group
// of 4 on one connection per node identity, the two request loops)
// against the VIP; extra flags are passed on. It is killed at teardown if
// still running.
func (cp *ControlPlane) StartClients(extra ...string) (*Clients, error) {
	n := clientRuns.Add(1)
	dir := cp.Lab.Client.Dir
	out := filepath.Join(dir, fmt.Sprintf("clients-%d.jsonl", n))
	var kubelets []string
	for _, h := range cp.Lab.Nodes {
		kubelets = append(kubelets, h.Name)
	}
	argv := append([]string{cp.Bin.Clients,
		"-server", fmt.Sprintf("https://%s", netip.AddrPortFrom(cp.VIP, APIServerPort)),
		"-pki", cp.PKI.Dir, "-namespace", Namespace, "-out", out,
		"-run", fmt.Sprintf("r%d%s", n, strings.ToLower(strings.ReplaceAll(cp.Lab.Prefix, "-", ""))),
		"-kubelets", strings.Join(kubelets, ","),
	}, extra...)
	p, err := cp.Lab.Start(cp.Lab.Client, fmt.Sprintf("clients %d", n), filepath.Join(dir, fmt.Sprintf("clients-%d.log", n)), nil, argv...)
	if err != nil {
		return nil, err
	}
	return &Clients{Proc: p, Out: out}, nil
}

// Records reads what the tool has written so far.
func (c *Clients) Records() ([]Record, error) {
	b, err := os.ReadFile(c.Out)
	if err != nil {
		return nil, err
	}
	return ParseRecords(bytes.NewReader(b))
}

// Run parses what the tool has written so far.
func (c *Clients) Run() (*Run, error) {
	recs, err := c.Records()
	if err != nil {
		return nil, err
	}
	return NewRun(recs), nil
}

// WaitLive waits up to timeout until every informer has synced and each
// has delivered an object in the last second, and no request failed in
// it: the clients are in their steady state.
func (c *Clients) WaitLive(timeout time.Duration) error {
	var last string
	ok, _ := netlab.Eventually(timeout, 250*time.Millisecond, func() (bool, string) {
		if !c.Running() {
			last = fmt.Sprintf("clients exited: %v (log %s)", c.ExitErr(), c.Log)
			return true, ""
		}
		r, err := c.Run()
		if err != nil {
			last = err.Error()
			return false, ""
		}
		if r.Ready.IsZero() {
			last = "informers not synced"
			return false, ""
		}
		// The tool flushes every 100 ms: leave its tail out.
		now := time.Now().Add(-300 * time.Millisecond)
		st := r.Stats(now.Add(-time.Second), now)
		if st.Watches == 0 || st.Requests == 0 {
			last = fmt.Sprintf("%d informers, %d requests in the last second", st.Watches, st.Requests)
			return false, ""
		}
		last = fmt.Sprintf("last second: %d failed, stall %v, not back %v", st.Failed, st.Stall, st.NotBack)
		return st.Failed == 0 && len(st.NotBack) == 0, ""
	})
	if !ok || !c.Running() {
		return fmt.Errorf("clients not live within %v: %s", timeout, last)
	}
	return nil
}

// Stop ends the tool (SIGTERM: it deletes its objects and flushes) and
// returns its run.
func (c *Clients) Stop() (*Run, error) {
	if err := c.Proc.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		return nil, err
	}
	return c.Run()
}
