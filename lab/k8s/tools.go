//go:build tools

// The lab builds kube-apiserver straight from k8s.io/kubernetes; this keeps it
// in go.mod and go.sum.
package k8s

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
