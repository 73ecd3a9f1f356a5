//! Property tests on every ring decoder that takes bytes from outside: the control-plane
//! frame (`wire::read_msg`, `wire::decode`), the data-link handshake
//! (`tcp::decode_frame`), and the launcher's environment (`launcher::resolve`). Bounded
//! cases, in the ordinary `cargo test` run: no panic, and nothing read or allocated past
//! the frame limits.

use std::collections::BTreeMap;
use std::io::Read;

use fabprobe::ring::collective::transport::tcp::{Decoded, Handshake, decode_frame};
use fabprobe::ring::launcher::{Flags, resolve};
use fabprobe::ring::model::{Phase, WaitReport};
use fabprobe::ring::wire::{self, MAX_FRAME, Msg};
use proptest::prelude::*;

/// A reader over `bytes` that counts what was taken from it.
struct Counting<'a> {
    bytes: &'a [u8],
    taken: usize,
}

impl Read for Counting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.bytes.len() - self.taken);
        buf[..n].copy_from_slice(&self.bytes[self.taken..self.taken + n]);
        self.taken += n;
        Ok(n)
    }
}

/// Every control message's tag, as the wire spells it.
const TYPES: [&str; 17] = [
    "hello",
    "table",
    "reject",
    "ready",
    "go",
    "heartbeat",
    "stuck",
    "failed",
    "results",
    "counters",
    "row",
    "done",
    "abort",
    "ping",
    "scan_run",
    "scan_samples",
    "scan_end",
];

/// Field names of the control messages (and of what they carry).
const FIELDS: [&str; 27] = [
    "rank",
    "error",
    "phase",
    "round",
    "step",
    "channel",
    "waiting_on",
    "bytes_received",
    "progress",
    "samples",
    "ranks",
    "row",
    "index",
    "shift",
    "reps",
    "bytes",
    "protocol",
    "info",
    "token",
    "verdicts",
    "failed",
    "reason",
    "port_counters",
    "link_fault",
    // Protocol 4: a rank's part of the table in bounded frames, and a scan order's peers.
    "more",
    "shared_transport",
    "peers",
];

/// A JSON value of any type, often out of range for the field it lands in.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        Just("18446744073709551616".to_string()),
        Just("-1".to_string()),
        Just("1e400".to_string()),
        Just("null".to_string()),
        Just("true".to_string()),
        "\\PC{0,8}".prop_map(|s| format!("{s:?}")),
        Just("[]".to_string()),
        Just("{}".to_string()),
        Just(r#"[{"rank":1}]"#.to_string()),
        Just(r#"{"size_bytes":4,"time_us":1.0}"#.to_string()),
        Just(r#""all_gather""#.to_string()),
    ]
}

/// The tag a decoded message carries (its `type`).
fn tag(m: &Msg) -> String {
    serde_json::to_value(m).unwrap()["type"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Bytes that look like the start of a frame often enough to get past the magic.
fn frame_like(magic: &'static [u8; 4]) -> impl Strategy<Value = Vec<u8>> {
    (
        any::<bool>(),
        prop_oneof![Just(0u32), 0u32..64, any::<u32>(), Just(u32::MAX)],
        proptest::collection::vec(any::<u8>(), 0..256),
    )
        .prop_map(move |(good_magic, len, body)| {
            let mut v = if good_magic {
                magic.to_vec()
            } else {
                body.iter().take(4).copied().collect()
            };
            v.extend_from_slice(&len.to_be_bytes());
            v.extend_from_slice(&body);
            v
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn control_frames_never_panic_or_read_past_the_limit(bytes in frame_like(b"FPR1")) {
        let mut r = Counting { bytes: &bytes, taken: 0 };
        let res = wire::read_msg(&mut r);
        // A length over the limit is refused after the 8-byte header, before any body.
        if bytes.len() >= 8 && &bytes[..4] == b"FPR1" {
            let len = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) as usize;
            if len > MAX_FRAME {
                prop_assert!(res.is_err());
                prop_assert_eq!(r.taken, 8);
            }
        }
        prop_assert!(r.taken <= 8 + MAX_FRAME);
    }

    #[test]
    fn control_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = wire::decode(&body);
    }

    #[test]
    fn control_json_with_a_valid_type_reaches_the_fields(
        kind in proptest::sample::select(TYPES.to_vec()),
        fields in proptest::collection::vec((proptest::sample::select(FIELDS.to_vec()), value()), 0..4),
    ) {
        // Near-miss messages: a valid `type` tag (the format is internally tagged), then
        // fields of the wrong type or range, so the field decoders run.
        let mut body = format!(r#"{{"type":"{kind}""#);
        for (f, v) in &fields {
            body += &format!(r#","{f}":{v}"#);
        }
        body.push('}');
        match wire::decode(body.as_bytes()) {
            Ok(m) => prop_assert_eq!(tag(&m), kind),
            Err(e) => {
                // Refused for a field, never for the tag: the decoder was reached.
                let e = e.to_string();
                // (A field's own enum, e.g. `phase`, may name an unknown variant of its own.)
                let tag_refused = format!("unknown variant `{kind}`");
                prop_assert!(!e.contains("missing field `type`") && !e.contains(&tag_refused), "{body}: {e}");
            }
        }
    }

    #[test]
    fn heartbeats_of_any_values_round_trip(
        rank in any::<u32>(), round in any::<u64>(), step in any::<u32>(), channel in any::<u32>(),
        on in proptest::option::of(any::<u32>()), recv in any::<u64>(), sent in any::<u64>(),
        since in any::<u64>(), progress in any::<u64>(), phase in 0u32..16,
    ) {
        let w = WaitReport {
            round, step, channel, waiting_on: on, waiting_to_receive: on.is_some(),
            bytes_received: recv, bytes_sent: sent, since_progress_ms: since, progress,
            ..WaitReport::new(rank, Phase::from_ordinal(phase))
        };
        for m in [Msg::Heartbeat(w.clone()), Msg::Stuck { wait: w, port_counters: Vec::new() }] {
            let body = serde_json::to_vec(&m).unwrap();
            prop_assert_eq!(wire::decode(&body).unwrap(), m);
        }
    }

    #[test]
    fn data_handshakes_never_panic_and_ask_for_bounded_bytes(bytes in frame_like(b"FPH1")) {
        match decode_frame::<Handshake>(&bytes) {
            Decoded::More(n) => {
                // Never more than the largest frame, counting what is already there.
                prop_assert!(n >= 1 && bytes.len() + n <= 8 + 4096);
            }
            Decoded::Bad(why) => {
                // The reason never carries the sender's bytes beyond the magic in hex.
                prop_assert!(why.chars().all(|c| c.is_ascii_graphic() || c == ' '), "{}", why);
            }
            Decoded::Done(_) => {}
        }
    }

    #[test]
    fn data_handshakes_round_trip_through_every_prefix(
        token in "\\PC{0,40}", from in any::<u32>(), to in any::<u32>(), channel in any::<u32>(),
    ) {
        let hs = Handshake { token, from_rank: from, to_rank: to, channel };
        let body = serde_json::to_vec(&hs).unwrap();
        let mut f = b"FPH1".to_vec();
        f.extend_from_slice(&(body.len() as u32).to_be_bytes());
        f.extend_from_slice(&body);
        for cut in 0..f.len() {
            // The header first, then exactly the rest of the body: never a byte past it.
            let want = if cut < 8 { 8 - cut } else { f.len() - cut };
            prop_assert_eq!(decode_frame::<Handshake>(&f[..cut]), Decoded::More(want));
        }
        prop_assert_eq!(decode_frame::<Handshake>(&f), Decoded::Done(hs));
        f.push(b'x');
        prop_assert!(matches!(decode_frame::<Handshake>(&f), Decoded::Bad(_)));
    }

    #[test]
    fn launcher_environments_never_panic(
        vars in proptest::collection::btree_map(
            prop_oneof![
                Just("FABPROBE_RANK"), Just("FABPROBE_WORLD"), Just("FABPROBE_COORDINATOR"),
                Just("FABPROBE_PORT"), Just("FABPROBE_TOKEN"), Just("SLURM_PROCID"),
                Just("SLURM_NTASKS"), Just("SLURM_STEP_NODELIST"), Just("SLURM_JOB_NODELIST"),
                Just("SLURM_NODELIST"), Just("SLURM_JOB_ID"), Just("SLURM_STEP_ID"),
                Just("OMPI_COMM_WORLD_RANK"), Just("OMPI_COMM_WORLD_SIZE"), Just("PMI_RANK"),
                Just("PMI_SIZE"), Just("PMI_JOBID"), Just("PMIX_NAMESPACE"), Just("RANK"),
                Just("WORLD_SIZE"), Just("MASTER_ADDR"), Just("MASTER_PORT"),
                Just("TORCHELASTIC_RUN_ID"),
            ],
            prop_oneof![
                "[0-9]{0,12}", "-?[0-9]{1,3}", "\\PC{0,24}",
                "[a-z]{1,6}\\[[0-9,\\-\\[\\]]{0,12}\\]?[a-z0-9,]{0,6}",
                "\\[?[0-9a-f:.]{0,20}\\]?(:[0-9]{0,6})?",
            ],
            0..8,
        ),
        flag_rank in proptest::option::of(any::<u32>()),
        flag_world in proptest::option::of(0u32..5000),
    ) {
        let env: BTreeMap<String, String> = vars.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let flags = Flags { rank: flag_rank, world: flag_world, coordinator: None, token: None };
        if let Ok(id) = resolve(&flags, &env) {
            prop_assert!(id.world >= 2 && id.rank < id.world, "{:?}", id);
            prop_assert!(!id.coordinator.is_empty());
        }
    }
}
