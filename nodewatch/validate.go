package nodewatch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// FieldError is one problem Validate found, naming the field it is about
// as vipd's configuration spells it ("kubeconfig", "node_name", "server",
// "tls_server_name"), so a configuration reader can place it.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// Validate returns every problem of the fields of c a configuration file
// sets (Kubeconfigs, NodeName, Server, TLSServerName), each a *FieldError,
// or nil. It reads no file: a kubeconfig that does not exist yet is not a
// problem (kubeadm writes kubelet.conf after vipd started).
func (c Config) Validate() []error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Err: fmt.Errorf(format, args...)})
	}
	for _, p := range c.Kubeconfigs {
		if !filepath.IsAbs(p) {
			add("kubeconfig", "kubeconfig must be an absolute path, got %q", p)
		}
	}
	if c.NodeName != "" && !validNodeName(c.NodeName) {
		add("node_name", "node_name %q is not a Kubernetes node name (lower-case letters, digits, '-' and '.', at most 253, starting and ending with a letter or digit)", c.NodeName)
	}
	if c.Server != "" {
		if err := checkServer(c.Server); err != nil {
			add("server", "%v", err)
		}
	}
	if n := c.TLSServerName; n != "" && (strings.ContainsFunc(n, func(r rune) bool { return r <= ' ' || r == '/' || r == ':' }) || len(n) > 253) {
		add("tls_server_name", "tls_server_name %q is not a host name", n)
	}
	return errs
}

// validNodeName is the rule of a Node's name: a DNS subdomain (RFC 1123),
// as the apiserver validates it.
func validNodeName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z') {
				return false
			}
		}
	}
	return true
}

// FindKubeconfig returns the first of paths that exists, as the watcher
// picks it ("" when none does).
func FindKubeconfig(paths []string) string {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}
