#!/bin/sh
# vipd package: before removal (deb prerm, rpm %preun). On a real removal
# (deb "remove", rpm count 0) stop and disable the unit; stopping (a stop job,
# not a restart) hands the VIP to another node and ExecStopPost removes the
# addresses. Upgrades keep the daemon running: the new package's postinstall
# restarts it in place.
set -e

case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		systemctl disable --now vipd.service || echo "vipd: stopping vipd failed; check 'ip addr' for leftover VIP addresses" >&2
	fi
	;;
esac
exit 0
