package config

import (
	"errors"

	"github.com/vipd/vipd/nodewatch"
)

// checkKubernetes reads the [kubernetes] section into the nodewatch.Config
// the daemon's Node watch is built from, and checks it with
// nodewatch.Config.Validate: the watch's rules, placed here at the key
// they are about.
func (v *validator) checkKubernetes(c *Config) {
	k := &c.Kubernetes
	w := nodewatch.Config{NodeName: k.NodeName, FallbackNodeName: c.NodeName, Server: k.Server, TLSServerName: k.TLSServerName,
		Rules: nodewatch.Rules{FollowExclusionLabel: k.FollowExclusionLabel}}
	if k.Kubeconfig != "" {
		w.Kubeconfigs = []string{k.Kubeconfig}
	} else {
		w.Kubeconfigs = nodewatch.DefaultKubeconfigs()
	}
	for _, err := range w.Validate() {
		var fe *nodewatch.FieldError
		key := "kubernetes"
		if errors.As(err, &fe) {
			key += "." + fe.Field
		}
		v.at(key, "%v", err)
	}
	k.watch = w
}
