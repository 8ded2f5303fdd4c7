package config

import (
	"os"
	"strings"
	"testing"
)

// TestKubeletCredentialsDropInSaysWhatItGrants: where an operator reads
// how to link the kubelet-credentials drop-in (the drop-in's own comment,
// docs/install.md, docs/configuration.md), the text before the link command says what linking
// grants: CAP_DAC_READ_SEARCH, reading any file on the host.
func TestKubeletCredentialsDropInSaysWhatItGrants(t *testing.T) {
	for _, f := range []string{"../../packaging/systemd/kubelet-credentials.conf", "../../docs/install.md", "../../docs/configuration.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		link := strings.Index(text, "ln -s /usr/share/vipd/systemd/kubelet-credentials.conf")
		if link < 0 {
			t.Fatalf("%s: no command linking the drop-in", f)
		}
		// The drop-in's comment up to the command; install.md's list
		// item about the kubelet's credentials up to it.
		before := text[:link]
		for _, item := range []string{"- **The kubelet's credentials**", "- let vipd read them"} {
			if j := strings.LastIndex(before, item); j >= 0 {
				before = before[j:]
			}
		}
		for _, want := range []string{"CAP_DAC_READ_SEARCH", "ANY file"} {
			if !strings.Contains(before, want) {
				t.Errorf("%s: the text leading to the link command does not say %q:\n%s", f, want, before)
			}
		}
	}
}
