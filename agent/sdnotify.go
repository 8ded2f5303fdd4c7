package agent

import "github.com/coreos/go-systemd/v22/daemon"

// sdNotify sends a notification to systemd when $NOTIFY_SOCKET is set and
// does nothing otherwise.
func sdNotify(state string) {
	_, _ = daemon.SdNotify(false, state)
}
