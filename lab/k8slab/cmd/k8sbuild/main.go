// Command k8sbuild builds the lab's Kubernetes binaries (kube-apiserver,
// kubectl, etcd, the clients tool) from lab/k8s into the cache, or finds
// them there, and prints their directory: make k8s-bin, so a cold build's
// minutes show apart from the labs that use them.
package main

import (
	"fmt"
	"os"

	"github.com/vipd/vipd/lab/k8slab"
)

func main() {
	b, err := k8slab.Build(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8sbuild:", err)
		os.Exit(1)
	}
	fmt.Println(b.Dir)
}
