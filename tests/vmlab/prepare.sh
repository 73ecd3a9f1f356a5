#!/usr/bin/env bash
# Fetch Debian's stock kernel (it ships rdma_rxe; the -cloud flavour does not) with
# `apt-get download`, unpack it without installing, and build a small initramfs
# (busybox-static + the modules the VM lab needs, in load order) that mounts the host's
# root over 9p and chroots into it. Everything is cached under $FABPROBE_VMLAB_CACHE
# (default /var/cache/fabprobe-vmlab); a second run with the same kernel does nothing.
# Prints the cache directory holding `vmlinuz` and `initrd.img` on success.
# Needs: apt-get, dpkg, busybox-static, cpio, kmod (modprobe, depmod).
set -euo pipefail

cache=${FABPROBE_VMLAB_CACHE:-/var/cache/fabprobe-vmlab}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock -w 600 9

# The versioned package linux-image-amd64 points at, as this machine's apt sees it.
pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$pkg" ] || { echo "vmlab: apt-cache knows no linux-image-amd64 (hint: apt-get update)" >&2; exit 1; }
kver=${pkg#linux-image-}
out="$cache/$kver"
stamp="$out/.ready-$(sha256sum "$here/init.sh" | cut -c1-16)"
if [ -f "$stamp" ]; then echo "$out"; exit 0; fi

deb=$(ls "$cache"/"${pkg}"_*.deb 2>/dev/null | head -1 || true)
if [ -z "$deb" ]; then
  (cd "$cache" && apt-get download "$pkg" >&2)
  deb=$(ls "$cache"/"${pkg}"_*.deb | head -1)
fi
rm -rf "$out"
mkdir -p "$out/x"
dpkg -x "$deb" "$out/x"
cp "$out/x/boot/vmlinuz-$kver" "$out/vmlinuz"
depmod -b "$out/x" "$kver"

# Modules in load order (modprobe resolves dependencies from modules.dep). Measured list:
# virtio + 9p for the root, crc32_generic before rdma_rxe (else "failed to init crc32
# algorithm"), virtio_net for the NIC, qdiscs/filters for shaping and drops.
mods="virtio_pci 9pnet_virtio 9p crc32_generic rdma_rxe ib_uverbs rdma_ucm virtio_net
      sch_tbf sch_htb sch_netem sch_ingress cls_u32 act_gact"
ir="$out/initramfs"
mkdir -p "$ir"/{bin,mods,proc,sys,dev,newroot}
cp /bin/busybox "$ir/bin/busybox"
: > "$ir/mods/order"
for m in $mods; do
  modprobe -d "$out/x" -S "$kver" --show-depends "$m" | while read -r verb path _; do
    [ "$verb" = insmod ] || continue
    base=$(basename "$path")
    if ! grep -qx "$base" "$ir/mods/order"; then
      cp "$path" "$ir/mods/$base"
      echo "$base" >> "$ir/mods/order"
    fi
  done
done
cp "$here/init.sh" "$ir/init"
chmod +x "$ir/init"
(cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1 > "$out/initrd.img")
rm -rf "$out/x" "$ir"
touch "$stamp"
echo "$out"
