//! Small pieces the drawings share: axis ticks, size labels, the heatmap's colour scale.

/// Ticks from 0 past `max` at 1, 2 or 5 x 10^k, about `want` of them. Pure.
pub(crate) fn ticks(max: f64, want: usize) -> Vec<f64> {
    if !(max.is_finite() && max > 0.0) {
        return vec![0.0, 1.0];
    }
    let raw = max / want.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let n = (max / step).ceil() as usize;
    (0..=n).map(|i| i as f64 * step).collect()
}

/// `4K`, `32M`, `1G`: a message size as nccl-tests' flags write it (powers of 1024). Pure.
pub(crate) fn size_label(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (u, s) in UNITS {
        if bytes >= u && bytes.is_multiple_of(u) {
            return format!("{}{s}", bytes / u);
        }
    }
    format!("{bytes}")
}

/// A tick's text: no trailing `.0`, at most two decimals.
pub(crate) fn num(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The heatmap's colour for a fraction of the expected rate: red up to 0.3 (a link at a
/// third of its peers is as bad as one at a tenth), amber near 0.6, green from 0.95 (what
/// the eye reads as "as expected"). Readable on light and dark. Pure.
pub(crate) fn fraction_colour(f: f64) -> String {
    let f = if f.is_finite() { f } else { 0.0 };
    let hue = ((f - 0.3) / 0.65).clamp(0.0, 1.0) * 125.0;
    format!("hsl({hue:.0},70%,45%)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_cover_the_maximum_in_round_steps() {
        assert_eq!(ticks(9.3, 5), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(0.47, 4), [0.0, 0.2, 0.4, 0.6000000000000001]);
        assert_eq!(ticks(0.0, 4), [0.0, 1.0]);
        assert_eq!(ticks(f64::NAN, 4), [0.0, 1.0]);
    }

    #[test]
    fn sizes_as_flags_write_them() {
        assert_eq!(size_label(4096), "4K");
        assert_eq!(size_label(32 << 20), "32M");
        assert_eq!(size_label(1 << 30), "1G");
        assert_eq!(size_label(1000), "1000");
        assert_eq!(size_label(1536), "1536");
    }

    #[test]
    fn colour_scale_ends() {
        assert_eq!(fraction_colour(0.0), "hsl(0,70%,45%)");
        assert_eq!(fraction_colour(0.3), "hsl(0,70%,45%)");
        assert_eq!(fraction_colour(0.625), "hsl(62,70%,45%)");
        assert_eq!(fraction_colour(1.3), "hsl(125,70%,45%)");
        assert_eq!(fraction_colour(f64::NAN), "hsl(0,70%,45%)");
        assert_eq!(num(2.50), "2.5");
        assert_eq!(num(10.0), "10");
    }
}
