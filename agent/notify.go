package agent

import (
	"sort"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// sdNotify sends a notification to systemd when $NOTIFY_SOCKET is set and
// does nothing otherwise. [Options.Notify]
func sdNotify(state string) {
	_, _ = daemon.SdNotify(false, state)
}

// markReady tells systemd the agent is up: the API listens, the first join
// was tried and the first pass ran.
func (a *Agent) markReady() {
	if !a.st.ready {
		a.st.ready = true
		// Logged before READY=1, so that the journal shows it before
		// systemd's "Started" (systemd-test step 1e reads that order).
		a.log.Info("vipd ready", "members", len(a.members.Members()))
		a.opts.Notify("READY=1")
	}
}

// watchdogEvery is how often the loop pings systemd's watchdog; the unit's
// WatchdogSec is several times longer.
const watchdogEvery = 500 * time.Millisecond

// notifyStatus sends STATUS= when what this node holds changes, and pings
// the watchdog: the ping comes from the loop, so a wedged loop gets the
// daemon restarted.
func (a *Agent) notifyStatus() {
	var held []string
	for _, v := range a.st.vips {
		if v.held {
			held = append(held, v.cfg.Name)
		}
	}
	sort.Strings(held)
	s := "holding no VIP"
	if len(held) > 0 {
		s = "holding " + strings.Join(held, ", ")
	}
	if a.st.withdrawn {
		s += " (withdrawn)"
	}
	if s != a.st.lastStatus {
		a.st.lastStatus = s
		a.opts.Notify("STATUS=" + s)
	}
	if now := a.now(); now.Sub(a.st.lastPing) >= watchdogEvery {
		a.st.lastPing = now
		a.opts.Notify("WATCHDOG=1")
	}
}
