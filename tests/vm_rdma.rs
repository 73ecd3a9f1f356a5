//! Tests on a real kernel RDMA stack: Soft-RoCE (`rdma_rxe`) in QEMU VMs (see tests/vmlab).
//! Skipped loudly without root or QEMU; `FABPROBE_LAB=required` makes that a failure.

mod vmlab;

use std::time::Duration;

use vmlab::{VmLab, VmOpts};

/// The lab itself: two VMs reach each other over IP and over RC verbs (perftest's and
/// rdma-core's own tools, so a fabprobe bug cannot hide a broken lab).
#[test]
fn vm_lab_two_vms_talk_rdma() {
    let Some(lab) = VmLab::new("vm_lab_two_vms_talk_rdma", VmOpts::new(2)) else {
        return;
    };
    let dev = lab.must(0, "ibv_devices");
    assert!(dev.contains("rxe0"), "{dev}");
    let server = lab.spawn(1, "exec ibv_rc_pingpong -d rxe0 -g 1 -n 50 -s 4096");
    std::thread::sleep(Duration::from_millis(500));
    let mut client = None;
    for _ in 0..20 {
        let o = lab.exec(
            0,
            &format!("ibv_rc_pingpong -d rxe0 -g 1 -n 50 -s 4096 {}", lab.vms[1].ip),
            Duration::from_secs(60),
        );
        if o.ok() {
            client = Some(o);
            break;
        }
        // The server may not be listening yet on a loaded machine.
        std::thread::sleep(Duration::from_millis(500));
    }
    let client = client.expect("ibv_rc_pingpong client never succeeded");
    assert!(client.stdout.contains("iters in"), "{client:?}");
    let s = lab.wait(&server, Duration::from_secs(60));
    assert!(s.ok(), "{s:?}");
}
