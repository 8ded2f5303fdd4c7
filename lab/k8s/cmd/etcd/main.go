// Command etcd is etcd's own main (go.etcd.io/etcd/server/v3/etcdmain, the
// version kube-apiserver's etcd client is from), built in the lab module so
// the lab needs no etcd package: one member per control-plane node, stacked
// as kubeadm does.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
