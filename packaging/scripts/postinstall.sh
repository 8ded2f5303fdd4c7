#!/bin/sh
# vipd package: after install or upgrade (deb postinst "configure", rpm %post).
# Creates the vipd system group (owner of the API socket) and user (runs the
# daemon), makes the config readable by it, and reloads systemd. It does not
# enable or start vipd: edit /etc/vipd/vipd.toml first (docs/install.md).
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

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	if systemctl is-active --quiet vipd; then
		echo "vipd: the running daemon still uses the old binary; restart it node by node (systemctl restart vipd hands the VIP off first)"
	fi
fi
exit 0
