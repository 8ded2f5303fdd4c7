// Command fakeapiserver serves one Node from nodewatch/nodewatchtest's fake
// apiserver, for lab/kubeclient.sh: it writes a kubelet kubeconfig for the
// Node to DIR/kubelet.conf, registers the Node with the bulk a real one
// has (labels, conditions, images) and kubeadm's control-plane labels and
// taint, cordons and uncordons it every
// -period so a watcher decodes a change that often, and serves until
// SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/vipd/vipd/nodewatch/nodewatchtest"
)

func main() {
	dir := flag.String("dir", "", "directory for the PKI and kubelet.conf (required)")
	node := flag.String("node", "cp-1", "the Node's name")
	period := flag.Duration("period", 2*time.Second, "cordon or uncordon the Node this often (0: never)")
	flag.Parse()
	if *dir == "" {
		log.Fatal("fakeapiserver: -dir is required")
	}
	pki, err := nodewatchtest.NewPKI(*dir, *node)
	if err != nil {
		log.Fatal(err)
	}
	api, err := nodewatchtest.NewServer(pki, *node)
	if err != nil {
		log.Fatal(err)
	}
	defer api.Stop()
	api.Set(func(n map[string]any) {
		labels := nodewatchtest.Field(n, "metadata", "labels")
		for i := range 20 {
			labels[fmt.Sprintf("example.com/label-%d", i)] = "value"
		}
		var images []any
		for i := range 30 {
			images = append(images, map[string]any{"names": []any{fmt.Sprintf("registry.example/image-%d@sha256:%064d", i, i)}, "sizeBytes": 1 << 20})
		}
		st := nodewatchtest.Field(n, "status")
		st["images"] = images
		st["conditions"] = []any{
			map[string]any{"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "message": "kubelet has sufficient memory available"},
			map[string]any{"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure", "message": "kubelet has no disk pressure"},
			map[string]any{"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID", "message": "kubelet has sufficient PID available"},
			map[string]any{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"},
		}
	})
	// The labels and taint kubeadm's mark-control-plane phase adds.
	api.Shape(nodewatchtest.ShapeNamed("kubeadm"))
	conf := filepath.Join(*dir, "kubelet.conf")
	if err := pki.WriteKubeconfig(conf+".tmp", api.URL()); err != nil {
		log.Fatal(err)
	}
	if err := os.Rename(conf+".tmp", conf); err != nil {
		log.Fatal(err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	var tick <-chan time.Time
	if *period > 0 {
		t := time.NewTicker(*period)
		defer t.Stop()
		tick = t.C
	}
	for cordoned := false; ; {
		select {
		case <-sig:
			return
		case <-tick:
			cordoned = !cordoned
			api.Cordon(cordoned)
		}
	}
}
