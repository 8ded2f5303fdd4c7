package config

import (
	"time"
)

// L2Config configures the advertisement of the VIPs with mode "l2", on
// every interface.
type L2Config struct {
	// RefreshInterval: while this node holds an L2 VIP, it sends the VIP's
	// gratuitous ARP (IPv4: a request and a reply) or unsolicited neighbor
	// advertisement (IPv6) again every refresh_interval after the burst
	// it sends when it takes the VIP, so that a neighbour whose entry for
	// the VIP points elsewhere (it missed the burst, a switch or router
	// aged or kept an old entry, a split healed) is corrected within one
	// period. A holder that hands the VIP off, quiesces it or releases it
	// stops at once. "0s" turns it off; else at least 1s. A reload keeps
	// the running value: a change takes a restart. [3s]
	RefreshInterval string `toml:"refresh_interval"`

	refreshInterval time.Duration
}

// RefreshIntervalDuration returns the parsed refresh_interval (0: off).
func (c L2Config) RefreshIntervalDuration() time.Duration { return c.refreshInterval }

// checkL2 reads the [l2] section and checks it with the l2 announcers'
// rule (v.rules.L2RefreshInterval: l2.ValidRefreshInterval), placed at its
// key.
func (v *validator) checkL2(c *L2Config) {
	c.refreshInterval = 0
	if c.RefreshInterval == "0s" || c.RefreshInterval == "0" {
		return
	}
	d, ok := v.duration("l2.refresh_interval", c.RefreshInterval)
	if !ok {
		return
	}
	if r := v.rules.L2RefreshInterval; r != nil {
		if err := r(d); err != nil {
			v.at("l2.refresh_interval", "refresh_interval %v", err)
			return
		}
	}
	c.refreshInterval = d
}

// setVIPs gives the VIPs with mode "l2" the refresh interval their
// announcers are built with (VIPConfig.L2).
func (c L2Config) setVIPs(vips []VIPConfig) {
	for i := range vips {
		vips[i].refresh = 0
		if vips[i].Mode == ModeL2 {
			vips[i].refresh = c.refreshInterval
		}
	}
}

// L2Announcer is what the l2 announcer that carries a VIP is built with
// (VIPConfig.L2; backendconfig.L2 copies it into the l2 package's Config).
type L2Announcer struct {
	// Interface carries the address.
	Interface string
	// Quiet binds the address without advertising it: the VIPs with mode
	// "bgp", whose route the speaker announces.
	Quiet bool
	// RefreshInterval is l2.refresh_interval for mode "l2" (0: off, and
	// always for "bgp").
	RefreshInterval time.Duration
}
