#!/bin/sh
# vipd package: after removal (deb postrm, rpm %postun). Reloads systemd; on
# purge (deb) also deletes the state directory. The vipd user and group are
# kept, as Debian does for system accounts (files may still belong to them).
set -e

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
case "$1" in
purge)
	rm -rf /var/lib/vipd /run/vipd
	;;
esac
exit 0
