// Command kubectl is upstream kubectl (k8s.io/kubectl/pkg/cmd), built in the
// lab module so the lab's operator steps run the same version as its
// kube-apiserver.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
)

func main() {
	os.Exit(cli.Run(cmd.NewDefaultKubectlCommand()))
}
