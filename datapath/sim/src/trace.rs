//! Trace files: the recorded capacity of a link, in either of the two formats a scenario's
//! `link.trace` may name.
//!
//! - **mahimahi** (`mm-link`'s format): one integer per line, the millisecond at which one
//!   1500-byte packet may leave the bottleneck; several packets in one millisecond repeat the
//!   timestamp. The file repeats with period = its last timestamp.
//! - **throughput log** (`tput`): one sample per line, `time_s rate_mbps` (whitespace
//!   separated; `#` starts a comment line). The rate holds from its sample until the next one;
//!   the last holds for the median sampling interval (1 s if there is one sample). Times are
//!   taken relative to the first sample; a later sample at the same time replaces the earlier
//!   one. The log repeats with period = its duration, as a mahimahi file does. Rates of any
//!   size (a 5G log's 2 Gbit/s is a few hundred lines, where its mahimahi file would be
//!   gigabytes).
//!
//! The format is recognised from the content (the first line that is neither empty nor a
//! comment: one integer is mahimahi, two numbers a log) or, whatever the content, a `.tput`
//! suffix makes the file a log. A file that is neither, empty, out of time order, with a
//! negative or non-finite rate, or that never delivers is refused with the line and the fix.
//!
//! A log is served as a piecewise-constant rate: the capacity delivered by time `t` is
//! `B(t) = c·B_P + Σ_{j<i} r_j·(t_{j+1} − t_j) + r_i·(τ − t_i)` (cycle `c = ⌊t/P⌋`,
//! `τ = t − c·P`, sample `i` the last at or before `τ`), and a packet that starts service at
//! `s` leaves at the smallest `t` with `B(t) ≥ B(s) + 8·bytes` ([`RateLog::time_of_bits`]):
//! a zero-rate stretch (an outage) holds the packet until the rate comes back.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Highest rate (Mbit/s) a link may have: a log's sample, and (the scenario's bound) a rate,
/// a scheduled rate or a trace's mean.
pub const MAX_RATE_MBPS: f64 = 1e6;

/// A trace file that cannot be used: the file and what is wrong with it (the line and the
/// fix where there is one).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("trace file {path} (link.trace): {message}")]
pub struct TraceError {
    pub path: PathBuf,
    pub message: String,
}

/// Latest trace timestamp (ms): one day.
pub const MAX_TRACE_MS: u64 = 86_400_000;
/// Most delivery opportunities (lines) a trace may hold.
pub const MAX_TRACE_LINES: usize = 20_000_000;
/// Largest trace file read (bytes); only regular files are read.
pub const MAX_TRACE_BYTES: u64 = 256 << 20;
/// How long the only sample of a one-line log holds (s).
const ONE_SAMPLE_HOLD_S: f64 = 1.0;

/// A trace file as read: its format and its content.
#[derive(Debug, Clone, PartialEq)]
pub enum TraceFile {
    /// Delivery opportunities (ms, non-decreasing); period = the last.
    Mahimahi(Arc<[u64]>),
    /// A throughput log.
    Log(Arc<RateLog>),
}

/// A throughput log as a piecewise-constant rate that repeats with its period.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLog {
    /// Start of each sample (ns from the first sample; strictly increasing, the first 0).
    starts_ns: Box<[u64]>,
    /// Each sample's rate (bits per ns = Mbit/s / 1000).
    bits_per_ns: Box<[f64]>,
    /// Bits delivered before each sample's start within a period, and the period's total last.
    cum_bits: Box<[f64]>,
    period_ns: u64,
}

impl RateLog {
    /// A log from `(time_s, rate_mbps)` samples, already checked and in time order (times
    /// relative to the first sample), with the last sample holding `last_hold_s`.
    fn from_samples(samples: &[(f64, f64)], last_hold_s: f64) -> Self {
        let t0 = samples.first().map_or(0.0, |s| s.0);
        let mut starts: Vec<u64> = Vec::with_capacity(samples.len());
        let mut rates: Vec<f64> = Vec::with_capacity(samples.len());
        for &(t, mbps) in samples {
            let ns = ((t - t0) * 1e9).round() as u64;
            match starts.last() {
                // closer than a nanosecond: the later sample wins
                Some(&last) if last >= ns => {
                    if let Some(r) = rates.last_mut() {
                        *r = mbps / 1e3;
                    }
                }
                _ => {
                    starts.push(ns);
                    rates.push(mbps / 1e3);
                }
            }
        }
        let last = samples.last().map_or(0.0, |s| s.0);
        let period_ns = (((last - t0 + last_hold_s) * 1e9).round() as u64)
            .max(starts.last().map_or(0, |&s| s + 1));
        let mut cum = Vec::with_capacity(starts.len() + 1);
        cum.push(0.0);
        for i in 0..starts.len() {
            let end = starts.get(i + 1).copied().unwrap_or(period_ns);
            let prev = cum[i];
            cum.push(prev + (end - starts[i]) as f64 * rates[i]);
        }
        RateLog {
            starts_ns: starts.into(),
            bits_per_ns: rates.into(),
            cum_bits: cum.into(),
            period_ns,
        }
    }

    /// Samples the log holds (after merging samples at the same time).
    pub fn samples(&self) -> usize {
        self.starts_ns.len()
    }

    /// The period with which the log repeats (s).
    pub fn period_s(&self) -> f64 {
        self.period_ns as f64 / 1e9
    }

    /// Long-run mean rate (Mbit/s).
    pub fn mean_mbps(&self) -> f64 {
        self.period_bits() / self.period_ns as f64 * 1e3
    }

    /// Highest sample rate (Mbit/s).
    pub fn peak_mbps(&self) -> f64 {
        self.bits_per_ns.iter().copied().fold(0.0_f64, f64::max) * 1e3
    }

    fn period_bits(&self) -> f64 {
        self.cum_bits.last().copied().unwrap_or(0.0)
    }

    /// `B(t)`: bits the link can deliver over `[0, t)` ns.
    pub fn bits_before(&self, t_ns: f64) -> f64 {
        if t_ns <= 0.0 {
            return 0.0;
        }
        let p = self.period_ns as f64;
        let c = (t_ns / p).floor();
        let tau = (t_ns - c * p).clamp(0.0, p);
        let i = self
            .starts_ns
            .partition_point(|&s| s as f64 <= tau)
            .saturating_sub(1);
        c * self.period_bits()
            + self.cum_bits[i]
            + (tau - self.starts_ns[i] as f64).max(0.0) * self.bits_per_ns[i]
    }

    /// The smallest `t` (ns) with `B(t) ≥ bits`.
    pub fn time_of_bits(&self, bits: f64) -> f64 {
        if bits <= 0.0 {
            return 0.0;
        }
        let total = self.period_bits();
        let c = ((bits / total).ceil() - 1.0).max(0.0);
        let rem = (bits - c * total).clamp(f64::MIN_POSITIVE, total);
        let n = self.starts_ns.len();
        // the first sample whose stretch ends at or after `rem`: it has a positive rate,
        // since the stretch before it ended short of `rem`
        let i = self.cum_bits[1..].partition_point(|&e| e < rem).min(n - 1);
        let r = self.bits_per_ns[i];
        let into = if r > 0.0 {
            (rem - self.cum_bits[i]) / r
        } else {
            0.0
        };
        c * self.period_ns as f64 + self.starts_ns[i] as f64 + into.max(0.0)
    }
}

/// Read a trace file of either format (see the module header).
pub fn load_trace(path: &Path) -> Result<TraceFile, TraceError> {
    let terr = |message: String| TraceError {
        path: path.to_path_buf(),
        message,
    };
    let unreadable = |e: std::io::Error| {
        terr(format!(
            "cannot read it: {e} (check the path; relative paths resolve against the scenario \
             file's folder)"
        ))
    };
    // only a regular file, its size checked before reading: a FIFO would block, /dev/zero
    // would never end
    let text = ccp_files::read_regular_to_string(path, MAX_TRACE_BYTES).map_err(|e| match e {
        ccp_files::ReadError::Io(e) => unreadable(e),
        ccp_files::ReadError::NotText { at } => {
            terr(format!("it is not text (invalid UTF-8 at byte {at})"))
        }
        other => terr(format!("it is {other}")),
    })?;
    let is_log = path.extension().is_some_and(|e| e == "tput");
    parse_any(&text, is_log).map_err(terr)
}

/// Parse trace text of either format; `log`: it is a throughput log whatever it looks like
/// (a `.tput` file).
pub fn parse_any(text: &str, log: bool) -> Result<TraceFile, String> {
    if log {
        return parse_tput(text).map(|l| TraceFile::Log(Arc::new(l)));
    }
    let first = text
        .lines()
        .enumerate()
        .map(|(n, l)| (n, l.trim()))
        .find(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    let Some((n, line)) = first else {
        return Err(
            "it is empty: give one timestamp (ms) per delivery opportunity (mahimahi) or \
                    one `time_s rate_mbps` sample per line (a throughput log)"
                .into(),
        );
    };
    let fields: Vec<&str> = line.split_whitespace().collect();
    match fields.as_slice() {
        [one] if one.parse::<u64>().is_ok() => parse_trace(text).map(TraceFile::Mahimahi),
        [a, b] if a.parse::<f64>().is_ok() && b.parse::<f64>().is_ok() => {
            parse_tput(text).map(|l| TraceFile::Log(Arc::new(l)))
        }
        _ => Err(format!(
            "line {}: unknown trace format ({line:?}): a mahimahi file holds one integer \
             timestamp (ms) per line, a throughput log `time_s rate_mbps` per line (or name \
             it *.tput)",
            n + 1
        )),
    }
}

/// Parse a throughput log (see the module header).
pub fn parse_tput(text: &str) -> Result<RateLog, String> {
    let max_s = MAX_TRACE_MS as f64 / 1e3;
    let mut v: Vec<(f64, f64)> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let s = line.trim();
        if s.is_empty() || s.starts_with('#') {
            continue;
        }
        let at = |msg: String| format!("line {}: {msg}", n + 1);
        let fields: Vec<&str> = s.split_whitespace().collect();
        let [ts, rs] = fields.as_slice() else {
            return Err(at(format!(
                "{s:?} is not a sample: a throughput log holds `time_s rate_mbps` per line"
            )));
        };
        let t: f64 = ts
            .parse()
            .map_err(|_| at(format!("time {ts:?} is not a number of seconds")))?;
        let r: f64 = rs
            .parse()
            .map_err(|_| at(format!("rate {rs:?} is not a number of Mbit/s")))?;
        if !(t.is_finite() && t >= 0.0 && t <= max_s) {
            return Err(at(format!(
                "time {t} s is not in [0, {max_s}] s (one day): give seconds from the start"
            )));
        }
        if !r.is_finite() {
            return Err(at(format!("rate {r} is not a finite number of Mbit/s")));
        }
        if r < 0.0 {
            return Err(at(format!(
                "rate {r} Mbit/s is negative: use 0 for an outage"
            )));
        }
        if r > MAX_RATE_MBPS {
            return Err(at(format!(
                "rate {r} Mbit/s is above the simulator's {MAX_RATE_MBPS} Mbit/s"
            )));
        }
        if v.len() >= MAX_TRACE_LINES {
            return Err(format!(
                "more than {MAX_TRACE_LINES} samples: use a shorter log"
            ));
        }
        match v.last_mut() {
            Some(last) if t < last.0 => {
                return Err(at(format!(
                    "time {t} s is before the previous sample's {} s: samples must be in \
                     time order",
                    last.0
                )))
            }
            // the same instant twice: the later sample replaces the earlier
            Some(last) if t == last.0 => last.1 = r,
            _ => v.push((t, r)),
        }
    }
    if v.is_empty() {
        return Err("it is empty: give one `time_s rate_mbps` sample per line".into());
    }
    if v.iter().all(|s| s.1 == 0.0) {
        return Err("every rate is 0 Mbit/s: the link would never deliver a packet".into());
    }
    let mut gaps: Vec<f64> = v.windows(2).map(|w| w[1].0 - w[0].0).collect();
    gaps.sort_by(f64::total_cmp);
    let hold = if gaps.is_empty() {
        ONE_SAMPLE_HOLD_S
    } else {
        gaps[gaps.len() / 2]
    };
    Ok(RateLog::from_samples(&v, hold))
}

/// Parse mahimahi trace text: one delivery opportunity per line, a timestamp in ms,
/// non-decreasing; the trace repeats with period = the last timestamp.
pub fn parse_trace(text: &str) -> Result<Arc<[u64]>, String> {
    let mut v: Vec<u64> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let s = line.trim();
        if s.is_empty() {
            continue;
        }
        let t: u64 = s.parse().map_err(|_| {
            format!(
                "line {}: {s:?} is not a timestamp (one non-negative integer ms per line)",
                n + 1
            )
        })?;
        if t > MAX_TRACE_MS {
            return Err(format!(
                "line {}: timestamp {t} ms is after {MAX_TRACE_MS} ms (one day): a trace \
                 repeats, give one period of it",
                n + 1
            ));
        }
        if v.len() >= MAX_TRACE_LINES {
            return Err(format!(
                "more than {MAX_TRACE_LINES} delivery opportunities: use a shorter trace (or \
                 trace_scale)"
            ));
        }
        if let Some(&last) = v.last() {
            if t < last {
                return Err(format!(
                    "line {}: timestamp {t} ms is before the previous {last} ms: timestamps \
                     must not decrease",
                    n + 1
                ));
            }
        }
        v.push(t);
    }
    match v.last() {
        None => Err("it is empty: give one timestamp (ms) per delivery opportunity".into()),
        Some(0) => Err(
            "it lasts 0 ms: the last timestamp is the period and must be > 0 (a file holding \
             just `1` is a 12 Mbit/s link)"
                .into(),
        ),
        Some(_) => Ok(v.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(text: &str) -> RateLog {
        parse_tput(text).unwrap()
    }

    #[test]
    fn a_log_holds_each_rate_until_the_next_sample_and_the_last_for_the_median_gap() {
        // 8 Mbit/s for 1 s, 0 for 1 s, 16 Mbit/s for 2 s (gaps 1, 1, 2: median 1... the
        // last holds 1 s), times relative to the first sample
        let l = log("5 8\n6 0\n7 16\n9 4\n");
        assert_eq!(l.samples(), 4);
        assert!((l.period_s() - 5.0).abs() < 1e-12);
        // bits: 8e6 + 0 + 32e6 + 4e6 = 44e6 over 5 s
        assert!((l.mean_mbps() - 8.8).abs() < 1e-9);
        assert!((l.bits_before(1e9) - 8e6).abs() < 1e-3);
        assert!((l.bits_before(1.5e9) - 8e6).abs() < 1e-3);
        assert!((l.bits_before(2.5e9) - 16e6).abs() < 1e-3);
        // the second cycle
        assert!((l.bits_before(6e9) - 52e6).abs() < 1e-3);
        assert_eq!(l.peak_mbps(), 16.0);
    }

    #[test]
    fn departures_wait_out_an_outage() {
        let l = log("0 8\n1 0\n2 8\n");
        // the 8,000,001st bit is delivered once the outage ends at 2 s
        let t = l.time_of_bits(8e6 + 1.0);
        assert!((t - (2e9 + 125.0)).abs() < 1e-3, "{t}");
        // exactly 8e6 bits: at 1 s, not after the outage
        assert!((l.time_of_bits(8e6) - 1e9).abs() < 1e-3);
        // the inverse of B on a grid, across cycles
        for k in 1..200 {
            let b = k as f64 * 123_457.0;
            let t = l.time_of_bits(b);
            assert!((l.bits_before(t) - b).abs() < 1e-3, "{b} {t}");
            assert!(l.bits_before(t - 1.0) < b, "{b} {t}");
        }
    }

    #[test]
    fn duplicates_replace_and_rounding_merges() {
        let l = log("0 1\n1 2\n1 3\n2 4\n");
        assert_eq!(l.samples(), 3);
        // 1 + 3 + 4 Mbit over 3 s
        assert!((l.mean_mbps() - 8.0 / 3.0).abs() < 1e-9);
        // one sample: holds one second
        let one = log("# a comment\n3 12\n");
        assert_eq!((one.samples(), one.period_s()), (1, 1.0));
    }

    #[test]
    fn broken_logs_are_refused_with_the_line() {
        for (text, says) in [
            ("", "empty"),
            ("# only a comment\n", "empty"),
            ("0 1\n2 1\n1 1\n", "line 3"),
            ("0 1\n1 -2\n", "negative"),
            ("0 1\n1 NaN\n", "finite"),
            ("0 1\n1 inf\n", "finite"),
            ("0 0\n1 0\n", "every rate is 0"),
            ("0 1 2\n", "line 1"),
            ("x 1\n", "not a number of seconds"),
            ("-1 1\n", "line 1"),
            ("0 2000000\n", "above"),
        ] {
            let e = parse_tput(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn the_format_comes_from_the_content() {
        assert!(matches!(
            parse_any("0\n1\n1\n", false),
            Ok(TraceFile::Mahimahi(_))
        ));
        assert!(matches!(
            parse_any("# log\n0 1.5\n1 2\n", false),
            Ok(TraceFile::Log(_))
        ));
        // a tab-separated log
        assert!(matches!(
            parse_any("0\t1.5\n", false),
            Ok(TraceFile::Log(_))
        ));
        // one integer per line read as a log because the name says so: "1" has no rate
        assert!(parse_any("1\n", true).unwrap_err().contains("line 1"));
        for (text, says) in [
            ("", "empty"),
            ("1.5\n", "unknown trace format"),
            ("time,rate\n", "unknown trace format"),
            ("0 1\n5\n", "line 2"),
            ("5\n0 1\n", "line 2"),
        ] {
            let e = parse_any(text, false).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }
}
