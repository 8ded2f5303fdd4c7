package main

import (
	"errors"
	"fmt"

	"github.com/vipd/vipd/agent"
	"github.com/vipd/vipd/l2"
)

// cleanup removes every configured VIP address from this host: what
// `vipd cleanup` runs after a crash (systemd ExecStopPost).
func cleanup(c *agent.Config) error {
	var errs []error
	for _, v := range c.VIPs {
		if err := l2.RemoveAddress(v.Interface, v.Addr()); err != nil {
			errs = append(errs, fmt.Errorf("vip %s: %w", v.Name, err))
		}
	}
	return errors.Join(errs...)
}
