#!/bin/sh
# vipd package: after install or upgrade (deb postinst "configure
# [OLD-VERSION]", rpm %post with 1 on install, 2 on upgrade). Creates the vipd
# system group (owner of the API socket) and user (runs the daemon), makes the
# config readable by it, and reloads systemd. A first install does not enable
# or start vipd: edit /etc/vipd/vipd.toml first (docs/install.md). An upgrade
# restarts a running vipd with `systemctl try-restart`: a restart job, which
# vipd keeps its VIPs through (restart in place, cluster.restart_grace) when
# the new binary and every peer support it, and hands them off otherwise.
set -e

if ! getent group vipd >/dev/null; then
	groupadd --system vipd
fi
if ! getent passwd vipd >/dev/null; then
	nologin=/usr/sbin/nologin
	[ -x "$nologin" ] || nologin=/bin/false
	useradd --system --gid vipd --no-create-home --home-dir /var/lib/vipd \
		--shell "$nologin" --comment "vipd control-plane VIP agent" vipd
fi

# The config may hold secrets (gossip key, BGP passwords): 0640 root:vipd.
# The package ships it root:root; hand it to the group unless an admin chose
# another group.
conf=/etc/vipd/vipd.toml
if [ -f "$conf" ] && [ "$(stat -c %G "$conf")" = root ]; then
	chgrp vipd "$conf"
	chmod 0640 "$conf"
fi

upgrade=
case "$1" in
configure) [ -z "$2" ] || upgrade=1 ;;
[2-9]) upgrade=1 ;;
esac

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	if [ -n "$upgrade" ] && systemctl is-active --quiet vipd; then
		echo "vipd: restarting vipd on the new binary (in place: its VIPs stay when the peers support it)"
		systemctl try-restart vipd.service || echo "vipd: restart failed; see journalctl -u vipd (its peers take its VIPs over)" >&2
	fi
fi
exit 0
