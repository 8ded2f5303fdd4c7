package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// TestMemberlistConfig: "fast" tightens failure detection, "lan" keeps
// memberlist's defaults, and neither compresses (LZW's per-packet table was
// most of an idle node's garbage and saves nothing on our small messages).
func TestMemberlistConfig(t *testing.T) {
	lan := memberlist.DefaultLANConfig()
	for _, tt := range []struct {
		detection string
		probe     time.Duration
		suspicion int
	}{
		{"fast", 200 * time.Millisecond, 2},
		{"lan", lan.ProbeInterval, lan.SuspicionMult},
	} {
		t.Run(tt.detection, func(t *testing.T) {
			src := strings.Replace(goodConfig, `rejoin_interval = "10s"`, `rejoin_interval = "10s"`+"\nfailure_detection = \""+tt.detection+"\"", 1)
			c, err := Parse("m.toml", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			mc := memberlistConfig(c)
			if mc.EnableCompression {
				t.Error("compression is on")
			}
			if mc.ProbeInterval != tt.probe || mc.SuspicionMult != tt.suspicion {
				t.Errorf("probe interval %v, suspicion mult %d; want %v, %d", mc.ProbeInterval, mc.SuspicionMult, tt.probe, tt.suspicion)
			}
			if mc.Name != "cp-1" || mc.BindAddr != "192.0.2.11" || mc.AdvertiseAddr != "192.0.2.11" {
				t.Errorf("name %q bind %q advertise %q", mc.Name, mc.BindAddr, mc.AdvertiseAddr)
			}
		})
	}
}
