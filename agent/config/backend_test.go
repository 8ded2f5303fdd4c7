package config_test

import (
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/internal/backendconfig"
)

func init() {
	config.SetBackends(backendconfig.Rules(), backendconfig.Speaker, backendconfig.L2)
}
