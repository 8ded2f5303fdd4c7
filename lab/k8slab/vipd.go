package k8slab

import (
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// DocumentedVIP is a VIP called name at addr with the health check the
// README and docs/bootstrap.md recommend for kubeadm, and nothing else
// (vipd's default interval, timeout, rise and fall):
//
//	url = "https://127.0.0.1:6443/readyz"
//	ca_file = "/etc/kubernetes/pki/ca.crt"    (the lab's cluster CA)
//	tls_server_name = "kubernetes"
//
// TestLabHealthCheckIsTheDocumentedOne holds it to the documents.
func (cp *ControlPlane) DocumentedVIP(name string, addr netip.Addr) netlab.VIP {
	return netlab.VIP{Name: name, Address: addr, HealthURL: HealthURL, HealthCAFile: cp.PKI.CACert, HealthTLSServerName: ServerName}
}

// Agent is what keeps the VIP on a node of the lab: vipd here, keepalived
// in lab/bench. Its methods act on one node and return when the act is
// done (bounded).
type Agent interface {
	// Name is "vipd" or "keepalived".
	Name() string
	// Start starts the agent on h (again).
	Start(h *netlab.Host) error
	// Stop stops it as `systemctl stop` does: SIGTERM, and wait.
	Stop(h *netlab.Host) error
	// Crash kills it with SIGKILL.
	Crash(h *netlab.Host) error
	// Handoff moves the VIP away from h on purpose; Unhandoff undoes it.
	Handoff(h *netlab.Host) error
	Unhandoff(h *netlab.Host) error
	// Steady reports whether the agents agree on one holder; the detail
	// says what it saw.
	Steady() (bool, string)
	// Rejoined waits until h's agent, started again, is back in service
	// (a rolling restart waits for it before the next node).
	Rejoined(h *netlab.Host) error
}

// VipdAgent runs vipd on the lab's nodes.
type VipdAgent struct {
	Lab *netlab.Lab
	// Options are every node's configuration; VIPs[0] is the VIP the
	// scenarios move.
	Options netlab.VipdOptions
}

// NewVipd returns the vipd agent with the documented health check on the
// VIP (netlab.VIP4, as "apiserver") and o's other settings.
func (cp *ControlPlane) NewVipd(o netlab.VipdOptions) *VipdAgent {
	if len(o.VIPs) == 0 {
		o.VIPs = []netlab.VIP{cp.DocumentedVIP("apiserver", cp.VIP)}
	}
	return &VipdAgent{Lab: cp.Lab, Options: o}
}

// Name is "vipd".
func (a *VipdAgent) Name() string { return "vipd" }

// Start starts vipd on h and waits until its API answers.
func (a *VipdAgent) Start(h *netlab.Host) error {
	_, err := a.Lab.TryStartVipdConfig(h, a.Lab.VipdConfig(h, a.Options))
	return err
}

// StartAll starts vipd on every node.
func (a *VipdAgent) StartAll() error {
	for _, n := range a.Lab.Nodes {
		if err := a.Start(n); err != nil {
			return err
		}
	}
	return nil
}

// Stop sends SIGTERM (vipd hands its VIPs off first) and waits.
func (a *VipdAgent) Stop(h *netlab.Host) error {
	return a.Lab.StopVipd(h, syscall.SIGTERM, 30*time.Second)
}

// Crash kills h's vipd.
func (a *VipdAgent) Crash(h *netlab.Host) error {
	v := a.Lab.Vipd(h)
	if v == nil {
		return fmt.Errorf("no vipd on %s", h.Name)
	}
	v.Kill()
	return nil
}

// Handoff is `vipctl withdraw --wait`.
func (a *VipdAgent) Handoff(h *netlab.Host) error {
	_, err := a.Lab.Vipctl(h, "withdraw", "--wait", "--timeout", "30s")
	return err
}

// Unhandoff is `vipctl restore`.
func (a *VipdAgent) Unhandoff(h *netlab.Host) error {
	_, err := a.Lab.Vipctl(h, "restore")
	return err
}

// Steady: every node's vipd sees every node alive and one holder, every
// status agreeing.
func (a *VipdAgent) Steady() (bool, string) { return a.Lab.Steady(a.Options.VIPs[0]) }

// Rejoined waits until every node sees h alive and healthy.
func (a *VipdAgent) Rejoined(h *netlab.Host) error {
	return a.Lab.WaitMember(h, a.Lab.Nodes, 60*time.Second, "alive and healthy", func(m netlab.Member) bool {
		return m.State == "alive" && m.Healthy
	})
}
