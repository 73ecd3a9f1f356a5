#!/bin/busybox sh
# /init of the VM lab's initramfs: load the modules, mount the host's root (read-only 9p,
# tag host0), the job share (writable 9p, tag job) and the checkout (fpvm.workN=), bring up eth0 with the address from
# the kernel command line (fpvm.ip=, fpvm.name=, fpvm.mtu=), add rxe0 on it, and hand over
# to the agent script the host wrote into the job share. Any failure is written to the
# console and the VM powers off, so the host sees it at once instead of waiting.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
fail() { echo "fpvm: FAILED: $*"; echo o > /proc/sysrq-trigger; sleep 5; }
for m in $(cat /mods/order); do
  insmod "/mods/$m" || fail "insmod $m"
done
ip=; name=vm; mtu=1500
for a in $(cat /proc/cmdline); do
  case "$a" in
    fpvm.ip=*) ip=${a#fpvm.ip=} ;;
    fpvm.name=*) name=${a#fpvm.name=} ;;
    fpvm.mtu=*) mtu=${a#fpvm.mtu=} ;;
  esac
done
hostname "$name"
r=/newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 host0 $r || fail "mount host0"
mount -t proc proc $r/proc
mount -t sysfs sys $r/sys
mount -t devtmpfs dev $r/dev
for d in run tmp var/tmp root; do mount -t tmpfs tmp $r/$d || fail "tmpfs $d"; done
mkdir -p $r/run/job
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 job $r/run/job || fail "mount job"
# The checkout and its build at their host paths (fpvm.workN=PATH, tag workN), over the
# tmpfs above when they live under /tmp, /root or /run.
for a in $(cat /proc/cmdline); do
  case "$a" in
    fpvm.work[0-9]=*)
      tag=${a%%=*}; tag=${tag#fpvm.}; p=${a#*=}
      mkdir -p "$r$p" 2>/dev/null
      mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 "$tag" "$r$p" || fail "mount $tag at $p"
      ;;
  esac
done
ip link set lo up
ip link set eth0 mtu "$mtu" up || fail "no eth0"
[ -n "$ip" ] && ip addr add "$ip" dev eth0
echo "fpvm: $name up at $ip"
exec chroot $r /bin/sh /run/job/agent.sh
