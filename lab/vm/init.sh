#!/bin/busybox sh
# /init of the lab VM (lab/vm): runs as PID 1 from the initramfs, with
# busybox and the kernel modules Initramfs put in it. It loads the modules
# (/etc/modules.order), mounts the host's share (9p tag "vipdvm", read-write)
# and builds the job's root: a tmpfs with the host directories the share's
# vm/mounts names mounted read-only over 9p (lines "ro TAG PATH", "link
# TARGET PATH"), /proc, /sys, /dev, a tmpfs /tmp and /run, and the share
# at /vm. Then it runs /vm/vm/job there (chroot; the kernel's helpers such
# as modprobe stay in the initramfs), with its output on the console and in
# vm/output, writes its exit status to vm/exit and powers off. Anything
# that goes wrong before the job powers off too, without vm/exit.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
say() { echo "vm-init: $* ($(cut -d' ' -f1 /proc/uptime)s)"; }
die() {
	say "error: $*"
	sync
	poweroff -f
	reboot -f
}
say "kernel $(uname -r) up"
while read -r m; do
	insmod "$m" || die "insmod $m"
done </etc/modules.order
o=trans=virtio,version=9p2000.L,msize=262144
mkdir -p /share /newroot
mount -t 9p -o "$o" vipdvm /share || die "mount the share (9p tag vipdvm)"
R=/newroot
mount -t tmpfs -o mode=0755 root "$R" || die "tmpfs root"
while read -r kind a b; do
	case $kind in
	ro) mkdir -p "$R$b" && mount -t 9p -o "$o,ro,cache=loose" "$a" "$R$b" || die "mount $a on $b" ;;
	link) mkdir -p "$R$(dirname "$b")" && ln -s "$a" "$R$b" || die "link $b" ;;
	*) die "vm/mounts: bad line: $kind $a $b" ;;
	esac
done </share/vm/mounts
mkdir -p "$R/proc" "$R/sys" "$R/dev" "$R/tmp" "$R/run" "$R/vm" "$R/root" "$R/var/tmp"
ln -s ../run "$R/var/run"
mount -t proc proc "$R/proc" &&
	mount -t sysfs sysfs "$R/sys" &&
	mount -t devtmpfs devtmpfs "$R/dev" &&
	mount -t tmpfs -o mode=1777 tmp "$R/tmp" &&
	mount -t tmpfs -o mode=0755 run "$R/run" &&
	mount -o bind /share "$R/vm" || die "mount the job's root"
hostname vipd-vm
ip link set lo up
say "running the job"
{
	chroot "$R" /bin/sh /vm/vm/job
	echo $? >/share/vm/exit
} 2>&1 | tee /share/vm/output
say "job exited $(cat /share/vm/exit 2>/dev/null || echo '(no status)')"
sync
poweroff -f
reboot -f
