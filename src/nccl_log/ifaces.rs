//! Virtual interfaces NCCL can pick for bootstrap and sockets, by the naming rules of the
//! projects that create them (their sources, not a list of sightings):
//! * Docker/moby: the default bridge `docker0`; user-defined bridges `br-` + the first 12 hex
//!   digits of the network id; the host end of a container's veth pair `veth` + 7 hex digits
//!   (libnetwork `netutils.GenerateIfaceName("veth", 7)`).
//! * Podman: `podman0` (netavark's default), `cni-podman0` (its CNI era).
//! * libvirt: NAT bridges `virbr%d` (the default network's template), guest taps `vnet%d`,
//!   `macvtap%d`.
//! * Kubernetes CNIs: Calico's host veths `cali` + 11 hex digits, its IPIP `tunl0` and VXLAN
//!   `vxlan.calico`; Flannel's VXLAN `flannel.<VNI>`, `flannel-wg`, and the bridge plugin's
//!   default `cni0`; Weave's `weave`, `vethwe-*`, `datapath`, `vxlan-6784`; Cilium's
//!   `cilium_host`, `cilium_net`, `cilium_vxlan`, `cilium_geneve` and endpoint veths `lxc` +
//!   hex; Antrea's `antrea-gw0`; kube-router's `kube-bridge`; kube-proxy's IPVS dummy
//!   `kube-ipvs0` (holds service addresses, never a node's).
//! * The kernel: the fallback device each tunnel module creates in every network namespace
//!   it is loaded in (`alloc_netdev` in net/ipv6/sit.c `sit0`, ip_gre.c `gre0`, `gretap0`,
//!   `erspan0`, ip_vti.c `ip_vti0`, ip6_tunnel.c `ip6tnl0`, ip6_gre.c `ip6gre0`,
//!   `ip6gretap0`, ip6_vti.c `ip6_vti0`; ipip.c's `tunl0` is Calico's IPIP device above):
//!   no endpoints, at most a link-local address no other host can reach.

/// What an interface of that name is, for a job across hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Addresses only this host (or its containers) can reach: a bridge, a veth or tap end.
    HostLocal,
    /// An overlay or pod gateway other nodes route to: it works, through encapsulation.
    Overlay,
}

fn hex(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The kind of a virtual interface and the project whose naming rule it follows; `None`
/// for a name no such rule makes (a physical NIC, a bond, IPoIB, a VLAN of those).
pub(crate) fn classify(name: &str) -> Option<(Kind, &'static str)> {
    use Kind::*;
    let rest = |p: &str| name.strip_prefix(p);
    let hit = match name {
        "docker0" => (HostLocal, "Docker default bridge"),
        "podman0" | "cni-podman0" => (HostLocal, "Podman bridge"),
        "cni0" => (Overlay, "CNI bridge plugin (Flannel) pod bridge"),
        "tunl0" => (Overlay, "Calico IPIP tunnel"),
        "vxlan.calico" => (Overlay, "Calico VXLAN"),
        "flannel-wg" | "flannel-wg-v6" => (Overlay, "Flannel WireGuard"),
        "weave" | "datapath" | "vxlan-6784" => (Overlay, "Weave Net"),
        "cilium_host" | "cilium_net" | "cilium_vxlan" | "cilium_geneve" => (Overlay, "Cilium"),
        "antrea-gw0" => (Overlay, "Antrea gateway"),
        "kube-bridge" => (Overlay, "kube-router bridge"),
        "kube-ipvs0" => (HostLocal, "kube-proxy IPVS dummy (service addresses)"),
        "sit0" | "gre0" | "gretap0" | "erspan0" | "ip_vti0" | "ip6tnl0" | "ip6gre0" | "ip6gretap0"
        | "ip6_vti0" => (HostLocal, "kernel fallback tunnel device"),
        _ if rest("br-").is_some_and(|h| hex(h, 12)) => (HostLocal, "Docker user-defined bridge"),
        _ if rest("veth").is_some_and(|h| hex(h, 7)) => (HostLocal, "Docker container veth"),
        _ if rest("vethwe-").is_some() => (Overlay, "Weave Net"),
        _ if rest("veth").is_some() => (HostLocal, "veth pair end"),
        _ if rest("virbr").is_some_and(|d| digits(d.trim_end_matches("-nic"))) => {
            (HostLocal, "libvirt NAT bridge")
        }
        _ if rest("vnet").is_some_and(digits) => (HostLocal, "libvirt guest tap"),
        _ if rest("macvtap").is_some_and(digits) => (HostLocal, "libvirt macvtap"),
        _ if rest("cali").is_some_and(|h| hex(h, 11)) => (HostLocal, "Calico workload veth"),
        _ if rest("flannel.").is_some_and(digits) => (Overlay, "Flannel VXLAN"),
        _ if rest("lxc").is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit() || b == b'_')) => {
            (HostLocal, "Cilium endpoint veth")
        }
        _ => return None,
    };
    Some(hit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_projects_rules() {
        for (n, k) in [
            ("docker0", Some(Kind::HostLocal)),
            ("br-3f2a9c1d0b7e", Some(Kind::HostLocal)),
            ("veth1a2b3c4", Some(Kind::HostLocal)),
            ("virbr0", Some(Kind::HostLocal)),
            ("virbr0-nic", Some(Kind::HostLocal)),
            ("vnet12", Some(Kind::HostLocal)),
            ("cali1234567890a", Some(Kind::HostLocal)),
            ("lxc0a1b2c3d4e5f", Some(Kind::HostLocal)),
            ("kube-ipvs0", Some(Kind::HostLocal)),
            ("ip6tnl0", Some(Kind::HostLocal)),
            ("sit0", Some(Kind::HostLocal)),
            ("gre0", Some(Kind::HostLocal)),
            ("ip6tnl1", None),
            ("gre1", None),
            ("flannel.1", Some(Kind::Overlay)),
            ("cni0", Some(Kind::Overlay)),
            ("cilium_host", Some(Kind::Overlay)),
            ("weave", Some(Kind::Overlay)),
            ("eth0", None),
            ("bond0", None),
            ("ib0", None),
            ("ens5", None),
            ("br0", None),
            ("br-lan", None),
            ("calico", None),
            ("enp1s0f0np0", None),
        ] {
            assert_eq!(classify(n).map(|c| c.0), k, "{n}");
        }
    }
}
