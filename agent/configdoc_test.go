package agent

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// configKeys lists every key path of the configuration ("cluster.peers",
// "vip.health.url", "bgp.peer.asn"), from the struct tags.
func configKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("toml")
		if tag == "" || tag == "-" {
			continue
		}
		path := prefix + tag
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			out = append(out, configKeys(ft, path+".")...)
			continue
		}
		out = append(out, path)
	}
	return out
}

// TestEveryKeyIsDocumented keeps vipd.toml.example and
// docs/configuration.md in step with the code.
func TestEveryKeyIsDocumented(t *testing.T) {
	example, err := os.ReadFile("../vipd.toml.example")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	keys := configKeys(reflect.TypeOf(Config{}), "")
	if len(keys) < 30 {
		t.Fatalf("found only %d keys; reflection broke", len(keys))
	}
	// The example documents a key as "key = ..." (possibly commented out)
	// under its table header.
	sections := exampleSections(string(example))
	for _, k := range keys {
		table, leaf := "", k
		if i := strings.LastIndex(k, "."); i >= 0 {
			table, leaf = k[:i], k[i+1:]
		}
		if !sections[table][leaf] {
			t.Errorf("vipd.toml.example does not document %s", k)
		}
		if !strings.Contains(string(ref), "`"+k+"`") {
			t.Errorf("docs/configuration.md does not document %s", k)
		}
	}
	// And nothing documented that the code does not know.
	known := map[string]bool{}
	for _, k := range keys {
		known[k] = true
	}
	for _, m := range regexp.MustCompile("\\| `([a-z_.]+)` \\|").FindAllStringSubmatch(string(ref), -1) {
		if !known[m[1]] {
			t.Errorf("docs/configuration.md documents unknown key %s", m[1])
		}
	}
}

// exampleSections maps table ("", "cluster", "vip.health", "bgp.peer") to
// the keys written (or commented out) under it.
func exampleSections(text string) map[string]map[string]bool {
	out := map[string]map[string]bool{"": {}}
	cur := ""
	header := regexp.MustCompile(`^#?\s*\[\[?([a-z_.]+)\]\]?\s*$`)
	kv := regexp.MustCompile(`^#?\s*#?\s*([a-z_]+)\s*=`)
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if m := header.FindStringSubmatch(line); m != nil {
			cur = m[1]
			if out[cur] == nil {
				out[cur] = map[string]bool{}
			}
			continue
		}
		if m := kv.FindStringSubmatch(line); m != nil {
			out[cur][m[1]] = true
		}
	}
	return out
}
