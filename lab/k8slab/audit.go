package k8slab

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// The apiservers' audit logs tell a request's time in the apiserver from
// its time outside (the network, the VIP's move, the client's own waits
// and retries): each apiserver logs, for every create, get and update of
// the clients' objects (ConfigMaps, the namespace, Leases), when it
// received the request and when it answered it, under the audit ID the
// clients tool sent with it (Audit-ID header) and records with the
// request. A request's time outside the apiserver is its duration less
// the apiserver's time on each of its attempts (an attempt the apiserver
// answered though the answer never reached the client included): what a failover of the
// VIP can cost a client, while an apiserver slow to answer (its etcd
// member waiting for a new leader, etcd's 7 s request timeout) is the
// apiserver's own (docs/design.md, "No request hangs after an unplanned
// failover").

// auditPolicy logs the clients' requests at Metadata level (no bodies)
// once they are answered, and nothing else: no watches, no lists, no
// health checks.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "get", "update"]
  resources:
  - group: ""
    resources: ["configmaps", "namespaces"]
  - group: "coordination.k8s.io"
    resources: ["leases"]
- level: None
`

// auditLog is node h's apiserver audit log.
func auditLog(h *netlab.Host) string { return filepath.Join(h.Dir, "apiserver-audit.log") }

// auditArgs are the kube-apiserver flags that write h's audit log with
// auditPolicy (written next to the PKI).
func (cp *ControlPlane) auditArgs(h *netlab.Host) []string {
	policy := filepath.Join(cp.PKI.Dir, "audit-policy.yaml")
	if _, err := os.Stat(policy); err != nil {
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
			cp.t.Fatalf("k8slab: %v", err)
		}
	}
	return []string{"--audit-policy-file", policy, "--audit-log-path", auditLog(h), "--audit-log-format", "json", "--audit-log-mode", "blocking"}
}

// Audit reads every node's apiserver audit log: the apiserver's time on
// each answered request, by audit ID.
func (cp *ControlPlane) Audit() (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, n := range cp.Lab.Nodes {
		f, err := os.Open(auditLog(n))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		err = ParseAudit(f, out)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", auditLog(n), err)
		}
	}
	return out, nil
}

// ParseAudit adds to into the apiserver's time (requestReceivedTimestamp
// to stageTimestamp) of each request the audit log r answered
// (ResponseComplete, or Panic), by audit ID: the attempts of one request
// (one ID) add up. A torn last line is ignored.
func ParseAudit(r io.Reader, into map[string]time.Duration) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var ev struct {
			AuditID                  string    `json:"auditID"`
			Stage                    string    `json:"stage"`
			RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
			StageTimestamp           time.Time `json:"stageTimestamp"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue
		}
		if ev.AuditID == "" || (ev.Stage != "ResponseComplete" && ev.Stage != "Panic") {
			continue
		}
		into[ev.AuditID] += ev.StageTimestamp.Sub(ev.RequestReceivedTimestamp)
	}
	return sc.Err()
}
