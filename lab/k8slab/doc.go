// Package k8slab runs a real Kubernetes control plane in a lab/netlab
// namespace lab.
package k8slab
