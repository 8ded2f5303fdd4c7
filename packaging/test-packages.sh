#!/usr/bin/env bash
# test-packages.sh — proof for `make packages` (run by `make package-test`).
#
#  1. drain hooks against fakes (packaging/hooks/test-hooks.sh); version mapping
#  2. make packages; .deb and .rpm contents, modes, conffile marking, scripts
#  3. the packaged binaries are static and print the stamped version
#  4. systemd-analyze verify / security on the unit, pointed at the built
#     binaries (plus a negative control showing verify does catch errors)
#  5. the arm64 .deb and .rpm: architecture fields, the same files and modes
#     as the host's, aarch64 static binaries that print the version, and
#     vipd --check, vipd --version and vipctl --help run under qemu-user
#     (qemu-aarch64-static; VIPD_PKG_REQUIRE_QEMU=1 makes its absence a
#     failure, as .ci/run sets it)
#  6. as root on Debian: dpkg -i, vipd --check as the vipd user, group/user,
#     conffile kept on reinstall, dpkg --purge, every file gone
#
# Step 6 touches only the vipd package it built: it refuses to run when a vipd
# package or /etc/vipd already exists, and undoes its install on any exit.
# Prints "packages: N passed, N failed, N skipped"; exits non-zero on failure.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=lab/lib.sh
. lab/lib.sh
lab_go_toolchain "$root"
pass=0
fail=0
skip=0
work=$(mktemp -d)
installed_by_us=
group_existed=
user_existed=

ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
skipped() { skip=$((skip + 1)); echo "skip $*"; }
# check NAME CMD...: one assertion from a command's exit status.
check() {
	local name=$1
	shift
	if "$@" >"$work/check.out" 2>&1; then ok "$name"; else
		bad "$name"; sed 's/^/     /' "$work/check.out" | head -20
	fi
}

cleanup() {
	local rc=$?
	if [ -n "$installed_by_us" ] && dpkg-query -W -f='${Status}' vipd 2>/dev/null | grep -q installed; then
		echo "cleanup: purging the vipd package installed by this test"
		dpkg --purge vipd >/dev/null || echo "cleanup: dpkg --purge vipd failed" >&2
	fi
	if [ -n "$installed_by_us" ]; then
		[ -n "$user_existed" ] || ! getent passwd vipd >/dev/null || userdel vipd || true
		[ -n "$group_existed" ] || ! getent group vipd >/dev/null || groupdel vipd || true
	fi
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT

echo "== drain hooks"
check "hook tests pass" packaging/hooks/test-hooks.sh

echo "== package version mapping"
while read -r in want; do
	check "pkg-version $in -> $want" test "$(packaging/pkg-version.sh "$in")" = "$want"
done <<'TABLE'
v1.2.3 1.2.3
v1.2.3-4-gabc1234 1.2.3+4.gabc1234
v1.3.0-rc1 1.3.0~rc1
v1.3.0-rc1-2-gdeadbee-dirty 1.3.0~rc1+2.gdeadbee.dirty
abc1234-dirty 0.0.0~abc1234.dirty
21726cb 0.0.0~21726cb
dev 0.0.0~dev
TABLE
check "dpkg orders 1.3.0~rc1 before 1.3.0" dpkg --compare-versions 1.3.0~rc1 lt 1.3.0
check "dpkg orders 1.2.3+4.gabc1234 after 1.2.3" dpkg --compare-versions 1.2.3+4.gabc1234 gt 1.2.3

echo "== build"
if [ "${1:-}" != --no-build ]; then
	make --no-print-directory packages
fi
# shellcheck source=/dev/null
. dist/packages.env
deb=$PKG_DEB
rpm=$PKG_RPM
check "deb built" test -s "$deb"
check "rpm built" test -s "$rpm"

expected=(
	/usr/bin/vipd
	/usr/bin/vipctl
	/usr/lib/systemd/system/vipd.service
	/etc/vipd/vipd.toml
	/usr/share/doc/vipd/install.md
	/usr/share/doc/vipd/drain.md
	/usr/share/doc/vipd/bootstrap.md
	/usr/share/doc/vipd/examples/vipd.toml.example
	/usr/share/vipd/hooks/vipd-drain
	/usr/share/vipd/hooks/vipd-undrain
	/usr/share/vipd/hooks/kubeadm-pre-reset
	/usr/share/vipd/hooks/rke2-upgrade
	/usr/share/vipd/hooks/capi-pre-drain
	/usr/share/man/man8/vipd.8.gz
	/usr/share/man/man8/vipctl.8.gz
	/usr/share/man/man5/vipd.toml.5.gz
	/usr/share/bash-completion/completions/vipctl
	/usr/share/fish/vendor_completions.d/vipctl.fish
	/usr/share/vipd/prometheus/vipd-alerts.yml
	/usr/share/vipd/grafana/vipd-dashboard.json
	/usr/share/vipd/networkd/vipd.conf
	/usr/share/vipd/systemd/kubelet-credentials.conf
)
executables=(/usr/bin/vipd /usr/bin/vipctl /usr/share/vipd/hooks/vipd-drain /usr/share/vipd/hooks/vipd-undrain
	/usr/share/vipd/hooks/kubeadm-pre-reset /usr/share/vipd/hooks/rke2-upgrade /usr/share/vipd/hooks/capi-pre-drain)

echo "== .deb contents"
# "-rwxr-xr-x root/root 123 2025-01-01 00:00 ./usr/bin/vipd" -> "-rwxr-xr-x /usr/bin/vipd"
dpkg-deb -c "$deb" | awk '{ p = $6; sub(/^\./, "", p); print $1, p }' >"$work/deb.list"
for p in "${expected[@]}"; do
	check "deb has $p" grep -qE "^[-l][^ ]* $p\$" "$work/deb.list"
done
for p in "${executables[@]}"; do
	check "deb: $p is 0755" grep -qx -- "-rwxr-xr-x $p" "$work/deb.list"
done
check "deb: /etc/vipd/vipd.toml is 0640" grep -qx -- "-rw-r----- /etc/vipd/vipd.toml" "$work/deb.list"
check "deb: /etc/vipd/vipd.toml is a conffile" sh -c "dpkg-deb -I '$deb' conffiles | grep -qx /etc/vipd/vipd.toml"
check "deb: version $PKG_VERSION-$PKG_RELEASE" test "$(dpkg-deb -f "$deb" Version)" = "$PKG_VERSION-$PKG_RELEASE"
check "deb: depends on passwd (useradd)" sh -c "dpkg-deb -f '$deb' Depends | grep -qw passwd"
check "deb: depends on procps (/bin/kill for ExecReload)" sh -c "dpkg-deb -f '$deb' Depends | grep -qw procps"
check "deb: postinst creates the vipd group" sh -c "dpkg-deb -I '$deb' postinst | grep -q 'groupadd --system vipd'"
check "deb: prerm stops the unit" sh -c "dpkg-deb -I '$deb' prerm | grep -q 'systemctl disable --now vipd'"
check "deb: postrm present" dpkg-deb -I "$deb" postrm
check "deb: zsh completion in vendor-completions" grep -qx -- "-rw-r--r-- /usr/share/zsh/vendor-completions/_vipctl" "$work/deb.list"
check "deb: man pages are 0644" grep -qx -- "-rw-r--r-- /usr/share/man/man5/vipd.toml.5.gz" "$work/deb.list"
check "deb: the networkd drop-in is 0644" grep -qx -- "-rw-r--r-- /usr/share/vipd/networkd/vipd.conf" "$work/deb.list"
check "deb: the kubelet-credentials drop-in is 0644" grep -qx -- "-rw-r--r-- /usr/share/vipd/systemd/kubelet-credentials.conf" "$work/deb.list"

echo "== .rpm contents"
rpm -qlp "$rpm" 2>/dev/null >"$work/rpm.list"
for p in "${expected[@]}"; do
	check "rpm has $p" grep -qx "$p" "$work/rpm.list"
done
rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILEMODES:perms} %{FILENAMES}\n]' "$rpm" 2>/dev/null >"$work/rpm.flags"
check "rpm: /etc/vipd/vipd.toml is %config(noreplace)" grep -qE '^[a-z]*c[a-z]*n[a-z]* -rw-r----- /etc/vipd/vipd.toml$' "$work/rpm.flags"
check "rpm: zsh completion in site-functions" grep -qx /usr/share/zsh/site-functions/_vipctl "$work/rpm.list"
check "rpm: version $PKG_VERSION-$PKG_RELEASE" test "$(rpm -qp --qf '%{VERSION}-%{RELEASE}' "$rpm" 2>/dev/null)" = "$PKG_VERSION-$PKG_RELEASE"
check "rpm: %post creates the vipd group" sh -c "rpm -qp --scripts '$rpm' 2>/dev/null | grep -q 'groupadd --system vipd'"
for p in "${executables[@]}"; do
	check "rpm: $p is 0755" grep -qE " -rwxr-xr-x $p\$" "$work/rpm.flags"
done

echo "== binaries in the .deb"
mkdir -p "$work/root"
dpkg-deb -x "$deb" "$work/root"
for b in vipd vipctl; do
	bin=$work/root/usr/bin/$b
	check "$b is static (no ELF interpreter)" sh -c "readelf -lW '$bin' | grep -q 'LOAD' && ! readelf -lW '$bin' | grep -q INTERP"
	check "$b built with CGO_ENABLED=0" sh -c "go version -m '$bin' | grep -q 'CGO_ENABLED=0'"
	check "$b --version prints $VERSION" sh -c "'$bin' --version | grep -qF -- '$VERSION'"
done

echo "== systemd unit"
unit=$work/unit/vipd.service
mkdir -p "$work/unit"
# Point the unit at the built binaries so verify checks real executables.
sed -e "s#/usr/bin/vipd #$work/root/usr/bin/vipd #g" packaging/systemd/vipd.service >"$unit"
check "unit uses the built binary in the verify copy" grep -q "^ExecStart=$work/root/usr/bin/vipd " "$unit"
verify_clean() { # prints verify's output; fails unless exit 0 and no output
	local out rc=0
	out=$(systemd-analyze verify "$@" 2>&1) || rc=$?
	if [ -n "$out" ] || [ "$rc" -ne 0 ]; then echo "exit $rc: $out"; return 1; fi
}
not() { ! "$@"; }
# The man pages the unit's Documentation= names are not installed yet (the
# installed unit below is verified with them).
check "systemd-analyze verify is clean" verify_clean --man=no "$unit"
sed 's/^Type=notify/Type=notify\nNoSuchSetting=1/' "$unit" >"$work/unit/broken.service"
check "negative control: verify flags an unknown key" not verify_clean --man=no "$work/unit/broken.service"
sed "s#$work/root/usr/bin/vipd #/nonexistent/vipd #" "$unit" >"$work/unit/missing.service"
check "negative control: verify flags a missing binary" not verify_clean --man=no "$work/unit/missing.service"
check "systemd-analyze security exposure <= 3.0" systemd-analyze security --offline=true --threshold=30 "$unit"
# The kubelet-credentials drop-in as packaged: exactly the unit's three
# capabilities plus CAP_DAC_READ_SEARCH, ambient and bounding, nothing else;
# verify and security load it from vipd.service.d next to the unit (make
# systemd-test checks what it lets vipd read).
dropin=$work/root/usr/share/vipd/systemd/kubelet-credentials.conf
caps="CAP_NET_ADMIN CAP_NET_RAW CAP_NET_BIND_SERVICE CAP_DAC_READ_SEARCH"
check "kubelet-credentials drop-in adds CAP_DAC_READ_SEARCH to the unit's capabilities, and nothing else" \
	sh -c "grep -v '^#' '$dropin' | grep . | tr '\n' '|' | grep -qxF '[Service]|AmbientCapabilities=$caps|CapabilityBoundingSet=$caps|'"
mkdir -p "$work/unit/vipd.service.d"
cp "$dropin" "$work/unit/vipd.service.d/"
check "with the kubelet-credentials drop-in: systemd-analyze verify is clean" verify_clean --man=no "$unit"
check "with the kubelet-credentials drop-in: systemd-analyze security exposure <= 3.0" systemd-analyze security --offline=true --threshold=30 "$unit"
echo "info: exposure with the drop-in: $(systemd-analyze security --offline=true "$unit" 2>/dev/null | sed -n 's/.*Overall exposure level for vipd.service: //p')"
rm -r "$work/unit/vipd.service.d"
for key in Type=notify NotifyAccess=main WatchdogSec=10s Restart=on-failure User=vipd \
	"ExecStartPre=/usr/bin/vipd --check --config /etc/vipd/vipd.toml" \
	"ExecStopPost=/usr/bin/vipd cleanup --config /etc/vipd/vipd.toml" \
	"CapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW CAP_NET_BIND_SERVICE" \
	"AmbientCapabilities=CAP_NET_ADMIN CAP_NET_RAW CAP_NET_BIND_SERVICE" \
	"RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK AF_PACKET"; do
	check "unit sets $key" grep -qxF "$key" packaging/systemd/vipd.service
done

echo "== arm64 packages"
if [ "${1:-}" != --no-build ]; then
	make --no-print-directory packages-arm64
fi
arm_env=dist/packages-arm64.env
check "arm64 packages built" test -s "$arm_env"
arm_deb=$(sed -n 's/^PKG_DEB=//p' "$arm_env")
arm_rpm=$(sed -n 's/^PKG_RPM=//p' "$arm_env")
check "arm64 deb built" test -s "$arm_deb"
check "arm64 rpm built" test -s "$arm_rpm"
check "arm64 deb: Architecture is arm64" test "$(dpkg-deb -f "$arm_deb" Architecture)" = arm64
check "arm64 rpm: arch is aarch64" test "$(rpm -qp --qf '%{ARCH}' "$arm_rpm" 2>/dev/null)" = aarch64
check "arm64 deb: version $PKG_VERSION-$PKG_RELEASE" test "$(dpkg-deb -f "$arm_deb" Version)" = "$PKG_VERSION-$PKG_RELEASE"
# The same files with the same modes as the host's packages (sizes differ).
dpkg-deb -c "$arm_deb" | awk '{ p = $6; sub(/^\./, "", p); print $1, p }' >"$work/deb-arm64.list"
check "arm64 deb: same files and modes as the $(dpkg-deb -f "$deb" Architecture) deb" diff "$work/deb.list" "$work/deb-arm64.list"
rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILEMODES:perms} %{FILENAMES}\n]' "$arm_rpm" 2>/dev/null >"$work/rpm-arm64.flags"
check "arm64 rpm: same files, modes and flags as the host's rpm" diff "$work/rpm.flags" "$work/rpm-arm64.flags"
mkdir -p "$work/arm64"
dpkg-deb -x "$arm_deb" "$work/arm64"
for b in vipd vipctl; do
	bin=$work/arm64/usr/bin/$b
	check "arm64 $b is an AArch64 ELF" sh -c "readelf -hW '$bin' | grep -q 'Machine: *AArch64'"
	check "arm64 $b is static (no ELF interpreter)" sh -c "readelf -lW '$bin' | grep -q 'LOAD' && ! readelf -lW '$bin' | grep -q INTERP"
	check "arm64 $b built with GOARCH=arm64 CGO_ENABLED=0" sh -c "go version -m '$bin' | grep -q 'GOARCH=arm64' && go version -m '$bin' | grep -q 'CGO_ENABLED=0'"
done
qemu=$(command -v qemu-aarch64-static || command -v qemu-aarch64 || true)
if [ -z "$qemu" ]; then
	if [ -n "${VIPD_PKG_REQUIRE_QEMU:-}" ]; then
		bad "arm64 binaries under qemu-user: qemu-aarch64-static not found (apt-get install qemu-user-static)"
	else
		skipped "arm64 binaries under qemu-user: qemu-aarch64-static not found (apt-get install qemu-user-static)"
	fi
else
	arm=$work/arm64/usr/bin
	check "arm64 vipd --version prints $VERSION (qemu-user)" sh -c "'$qemu' '$arm/vipd' --version | grep -qF -- '$VERSION'"
	check "arm64 vipctl --version prints $VERSION (qemu-user)" sh -c "'$qemu' '$arm/vipctl' --version | grep -qF -- '$VERSION'"
	check "arm64 vipctl --help explains withdraw (qemu-user)" sh -c "'$qemu' '$arm/vipctl' --help | grep -q withdraw"
	# --check on the shipped config, its key and state_dir pointed at this
	# test's directory; first without the key, which must fail and say how.
	sed -e "s#/etc/vipd/cluster.key#$work/arm64-cluster.key#" -e "s#\"/var/lib/vipd\"#\"$work/arm64-state\"#" \
		"$work/arm64/etc/vipd/vipd.toml" >"$work/arm64-vipd.toml"
	check "arm64 vipd --check without the cluster key fails and says how (qemu-user)" \
		sh -c "! '$qemu' '$arm/vipd' --check --config '$work/arm64-vipd.toml' >'$work/arm64-check.out' 2>&1 && grep -qF 'head -c 32 /dev/urandom | base64' '$work/arm64-check.out'"
	head -c 32 /dev/urandom | base64 >"$work/arm64-cluster.key"
	chmod 0600 "$work/arm64-cluster.key"
	check "arm64 vipd --check on the shipped config (qemu-user)" \
		sh -c "'$qemu' '$arm/vipd' --check --config '$work/arm64-vipd.toml' | grep -q 'configuration OK'"
fi

echo "== install on this machine"
if [ "$(id -u)" != 0 ] || ! command -v dpkg >/dev/null || [ ! -f /etc/debian_version ]; then
	skipped "dpkg install/purge: needs root on Debian"
else
	if dpkg-query -W -f='${Status}' vipd 2>/dev/null | grep -q installed || [ -e /etc/vipd ]; then
		bad "a vipd package or /etc/vipd already exists here; not touching it (run on a clean machine)"
		echo "packages: $pass passed, $fail failed, $skip skipped"
		exit 1
	fi
	getent group vipd >/dev/null && group_existed=1
	getent passwd vipd >/dev/null && user_existed=1
	installed_by_us=1
	check "dpkg -i" dpkg -i "$deb"
	check "package installed" sh -c "dpkg-query -W -f='\${Status}' vipd | grep -qx 'install ok installed'"
	for p in "${expected[@]}"; do
		check "installed $p" test -e "$p"
	done
	check "vipd group exists" getent group vipd
	check "vipd user exists in group vipd" sh -c "id -gn vipd | grep -qx vipd"
	check "config is root:vipd 0640" test "$(stat -c '%U:%G %a' /etc/vipd/vipd.toml)" = "root:vipd 640"
	check "vipd --version prints $VERSION" sh -c "/usr/bin/vipd --version | grep -qF -- '$VERSION'"
	check "vipctl --version prints $VERSION" sh -c "/usr/bin/vipctl --version | grep -qF -- '$VERSION'"
	# The shipped config turns membership encryption on: until the admin
	# makes the key (once, copied to every node), --check says how.
	check "vipd --check without the cluster key says how to make it" sh -c "! /usr/bin/vipd --check --config /etc/vipd/vipd.toml 2>&1 | grep -q 'configuration OK' && /usr/bin/vipd --check --config /etc/vipd/vipd.toml 2>&1 | grep -qF 'head -c 32 /dev/urandom | base64'"
	made_key=
	if [ ! -e /etc/vipd/cluster.key ]; then
		head -c 32 /dev/urandom | base64 >/etc/vipd/cluster.key && chown vipd:vipd /etc/vipd/cluster.key && chmod 0600 /etc/vipd/cluster.key && made_key=1
	fi
	check "vipd --check on the shipped config (with the key made as docs/install.md says)" sh -c "/usr/bin/vipd --check --config /etc/vipd/vipd.toml | grep -q 'configuration OK'"
	check "vipd --check as the vipd user (as ExecStartPre runs)" runuser -u vipd -- /usr/bin/vipd --check --config /etc/vipd/vipd.toml
	[ -n "$made_key" ] && rm -f /etc/vipd/cluster.key
	check "installed unit: systemd-analyze verify is clean" verify_clean /usr/lib/systemd/system/vipd.service
	check "installed hook runs" /usr/share/vipd/hooks/vipd-drain --help
	# The networkd drop-in: one [Network] section keeping foreign addresses
	# (make systemd-test checks what networkd does with it).
	check "installed networkd drop-in sets KeepConfiguration=yes under [Network]" \
		sh -c "grep -v '^#' /usr/share/vipd/networkd/vipd.conf | grep . | tr '\n' ' ' | grep -qx '\[Network\] KeepConfiguration=yes '"
	if command -v man >/dev/null; then
		for page in "8 vipd" "8 vipctl" "5 vipd.toml"; do
			# shellcheck disable=SC2086
			check "man $page finds the installed page" sh -c "man -w $page | grep -q ^/usr/share/man/"
		done
	fi
	check "bash loads the vipctl completion" bash -c '. /usr/share/bash-completion/completions/vipctl && complete -p vipctl'
	echo "# local edit by test-packages.sh" >>/etc/vipd/vipd.toml
	check "dpkg -i again (reinstall)" dpkg -i "$deb"
	check "conffile edit kept on reinstall" grep -qx "# local edit by test-packages.sh" /etc/vipd/vipd.toml
	check "dpkg --purge" dpkg --purge vipd
	check "package gone" sh -c "! dpkg-query -W -f='\${Status}' vipd 2>/dev/null | grep -q installed"
	for p in "${expected[@]}" /etc/vipd /usr/share/vipd /usr/share/doc/vipd /var/lib/vipd; do
		check "purged $p" test ! -e "$p"
	done
fi

echo "packages: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
