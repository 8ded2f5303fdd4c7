package membership

import (
	"fmt"

	"github.com/hashicorp/memberlist"

	"github.com/vipd/vipd/agent/config"
)

// LoadKeyring reads cluster.key_file: one or more base64 keys (16, 24 or 32
// bytes), one per line. The first key encrypts; all of them decrypt, which
// is how keys are rotated (add the new key as a second line everywhere,
// move it first everywhere, then remove the old one).
func LoadKeyring(path string) (*memberlist.Keyring, error) {
	keys, err := config.ReadKeys(path)
	if err != nil {
		return nil, err
	}
	kr, err := memberlist.NewKeyring(keys[1:], keys[0])
	if err != nil {
		return nil, fmt.Errorf("cluster key_file %s: %w", path, err)
	}
	return kr, nil
}

// RotateKeyring makes kr hold exactly the keys of path, the first one
// primary: what a SIGHUP after editing key_file does. Order of operations
// keeps the ring usable throughout: add, switch primary, then remove.
func RotateKeyring(kr *memberlist.Keyring, path string) (changed bool, err error) {
	keys, err := config.ReadKeys(path)
	if err != nil {
		return false, err
	}
	want := map[string]bool{}
	for _, k := range keys {
		want[string(k)] = true
	}
	have := map[string]bool{}
	for _, k := range kr.GetKeys() {
		have[string(k)] = true
	}
	for _, k := range keys {
		if !have[string(k)] {
			if err := kr.AddKey(k); err != nil {
				return changed, fmt.Errorf("install key: %w", err)
			}
			changed = true
		}
	}
	if string(kr.GetPrimaryKey()) != string(keys[0]) {
		if err := kr.UseKey(keys[0]); err != nil {
			return changed, fmt.Errorf("use key: %w", err)
		}
		changed = true
	}
	for _, k := range kr.GetKeys() {
		if !want[string(k)] {
			if err := kr.RemoveKey(k); err != nil {
				return changed, fmt.Errorf("remove key: %w", err)
			}
			changed = true
		}
	}
	return changed, nil
}
