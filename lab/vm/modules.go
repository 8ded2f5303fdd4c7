package vm

import (
	"bytes"
	"debug/elf"
	"fmt"
	"sort"
	"strings"
)

// ModuleInfo is what the VM's init needs to know about one kernel module:
// where it is in the kernel package and which modules it needs loaded
// first (its .modinfo "depends=").
type ModuleInfo struct {
	Name    string   // e.g. "8021q" (dashes as underscores, as the kernel names it)
	Path    string   // e.g. "lib/modules/6.1.0-56-amd64/kernel/net/8021q/8021q.ko"
	Depends []string // module names
}

// parseModinfo reads the name and dependencies of the kernel module in
// data (an ELF relocatable with a .modinfo section of NUL-separated
// key=value strings). path is where it came from, for errors and for the
// name when .modinfo has none.
func parseModinfo(path string, data []byte) (ModuleInfo, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return ModuleInfo{}, fmt.Errorf("module %s: %w", path, err)
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		return ModuleInfo{}, fmt.Errorf("module %s: no .modinfo section", path)
	}
	raw, err := sec.Data()
	if err != nil {
		return ModuleInfo{}, fmt.Errorf("module %s: .modinfo: %w", path, err)
	}
	m := ModuleInfo{Path: path}
	for _, kv := range bytes.Split(raw, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if !ok {
			continue
		}
		switch k {
		case "name":
			m.Name = v
		case "depends":
			for _, d := range strings.Split(v, ",") {
				if d = strings.TrimSpace(d); d != "" {
					m.Depends = append(m.Depends, moduleName(d))
				}
			}
		}
	}
	if m.Name == "" {
		base := path[strings.LastIndex(path, "/")+1:]
		m.Name = strings.TrimSuffix(base, ".ko")
	}
	m.Name = moduleName(m.Name)
	return m, nil
}

// moduleName is the kernel's form of a module name: dashes are
// underscores.
func moduleName(s string) string { return strings.ReplaceAll(s, "-", "_") }

// loadOrder returns the modules named in want together with everything
// they depend on, each after its dependencies: the order to insmod them.
// It fails on a name the index does not have and on a dependency cycle.
func loadOrder(index map[string]ModuleInfo, want []string) ([]ModuleInfo, error) {
	var order []ModuleInfo
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name, from string) error
	visit = func(name, from string) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("module dependency cycle at %s", name)
		case 2:
			return nil
		}
		m, ok := index[name]
		if !ok {
			if from != "" {
				return fmt.Errorf("module %s (needed by %s) is not in the kernel package", name, from)
			}
			return fmt.Errorf("module %s is not in the kernel package", name)
		}
		state[name] = 1
		deps := append([]string(nil), m.Depends...)
		sort.Strings(deps)
		for _, d := range deps {
			if err := visit(d, name); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, m)
		return nil
	}
	for _, w := range want {
		if err := visit(moduleName(w), ""); err != nil {
			return nil, err
		}
	}
	return order, nil
}
