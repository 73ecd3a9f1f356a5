//! CUDA's 802 (cudaErrorSystemNotReady, "system not yet initialized") is its own cause, with
//! the Fabric Manager as the first step (issue 34): the public threads in
//! tests/data/nccl-logs/SOURCES.md, section "CUDA 802".

use fabprobe::nccl_log::Analyzer;

fn verdicts(path: &str) -> Vec<(String, String, Option<String>, String)> {
    let mut a = Analyzer::new();
    a.read(path, std::fs::File::open(path).unwrap()).unwrap();
    a.finish()
        .verdicts
        .into_iter()
        .map(|v| (v.cause, v.severity.as_str().to_string(), v.host, v.next))
        .collect()
}

#[test]
fn the_threads_get_the_fabric_manager_cause() {
    for (file, host) in [
        ("nccl-tests-264-fm-disabled", Some("test")),
        ("pytorch-35710-runtime-802", None),
    ] {
        let v = verdicts(&format!("tests/data/nccl-logs/{file}.log"));
        assert_eq!(v.len(), 1, "{file}: {v:?}");
        let (cause, sev, h, next) = &v[0];
        assert_eq!(
            (cause.as_str(), sev.as_str(), h.as_deref()),
            ("cuda_system_not_ready", "fail", host),
            "{file}"
        );
        // The host is filled in where the log names it, so the step pastes.
        let on = host.unwrap_or("that host");
        assert!(
            next.starts_with(&format!("on {on}: `systemctl status nvidia-fabricmanager`")),
            "{file}: {next}"
        );
    }
}

/// NCCL's own WARN of the same error names the host from its header.
#[test]
fn an_nccl_warn_of_802_names_its_host() {
    let log = "node7:4242:4242 [0] misc/cudawrap.cc:188 NCCL WARN Cuda failure 802 'system not yet initialized'\n\
               node7:4242:4242 [0] NCCL INFO init.cc:1870 -> 1\n";
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r.log");
    std::fs::write(&p, log).unwrap();
    let v = verdicts(p.to_str().unwrap());
    assert_eq!(v[0].0, "cuda_system_not_ready");
    assert_eq!(v[0].2.as_deref(), Some("node7"));
}
