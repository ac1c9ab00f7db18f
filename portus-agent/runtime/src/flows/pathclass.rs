//! Path classes measured by the flow itself: what `ccp_auto` learns about a path in a flow's
//! first seconds, and the classifier that turns it into one of the portfolio table's classes.
//!
//! A flow's reports are cut into bins of [`Classifier::bin_ms`] of datapath time (each report
//! carries its interval's length, `Report.interval_us`, in every program) and the last
//! `window_s` seconds of bins give four features:
//!
//! ```text
//!   rate_iqr  = (q75(r_b) − q25(r_b)) / q50(r_b)   r_b = acked bytes / length of bin b
//!   rtt_iqr   = (q75(R_b) − q25(R_b)) / q50(R_b)   R_b = mean RTT sample of bin b
//!   inflation = mean(R_b) / min RTT − 1            min RTT over the whole flow
//!   loss      = lost / (lost + acked bytes / MSS)  over the window
//!   busy_rate_iqr = rate_iqr over the busy bins    busy: R_b ≥ (1 + BUSY_QUEUE) · min RTT
//!   busy_frac = busy bins / bins
//! ```
//!
//! A busy bin is one with a queue at the bottleneck: its delivery rate is the path's capacity,
//! not the sender's choice. On a constant link the busy bins deliver at one rate whatever the
//! sender does; on a variable path they follow the capacity. `busy_rate_iqr` is 0 with fewer
//! than [`MIN_BUSY_BINS`] busy bins (no evidence either way).
//!
//! `rate_iqr` is the signal the classes are about: a recorded cellular, 5G, WiFi or satellite
//! path changes its capacity from one 100 ms to the next whatever the sender does, a
//! constant-rate link delivers at its rate whenever the flow keeps it busy. Quartiles, not
//! the standard deviation: the sender's own short dips (BBR's 200 ms PROBE_RTT every 10 s,
//! one loss recovery) move a bin or two, which the standard deviation of 15 bins would
//! mistake for a variable path and the quartiles ignore. The others tell a variable path from
//! a flow that is merely window-limited (its rate changes with its window, its RTT does not)
//! and from random loss.
//!
//! The classifier is linear in the features compressed by `g(x) = ln(1 + 10·x)` (they are
//! heavy-tailed: a spread of 0.05 and one of 0.5 differ more than 5 and 5.5),
//!
//! ```text
//!   s = bias_a + Σ_i weights_a,i · g(feature_i)        class = above if s > 0, else below
//! ```
//!
//! with the weights of the algorithm `a` the flow runs when it is classified (`by_alg`; the
//! same path looks different under BBR's probing and under MOCC's pacing), else the pooled
//! `weights` and `bias`. Its numbers are fitted offline (`python -m ccp_train.pathclass fit`) on the
//! features this code computes, run in the simulator over the trace corpus's `train`
//! recordings and constant links, and shipped in the portfolio table (`classifier`). A flow is
//! first classified after `min_s` seconds of reports; afterwards its class changes only when
//! `hold_s` seconds of consecutive bins all say the other class (hysteresis), so a flow does
//! not switch back and forth on a path near the boundary. After a switch the window starts
//! empty: the features that can change the class again are all measured under the new
//! algorithm, and read by its rule.

use std::collections::VecDeque;

use ccp_algs::Interval;
use serde::{Deserialize, Serialize};

/// The features, in the order of [`Features::as_array`] and of a classifier's `weights`.
pub const FEATURES: [&str; 6] = [
    "rate_iqr",
    "rtt_iqr",
    "inflation",
    "loss",
    "busy_rate_iqr",
    "busy_frac",
];

/// A bin is busy when its mean RTT is this much above the flow's minimum (a queue of a tenth
/// of the base RTT: well above the simulator's and a host's RTT noise).
pub const BUSY_QUEUE: f64 = 0.1;
/// Busy bins needed before their rate spread counts.
pub const MIN_BUSY_BINS: usize = 4;

/// The latest stretch of bins [`PathMeter::recent_in_flight_bytes`] reads (s), and the fewest
/// bins it reads: long enough that the median skips one bin of a momentary cut, short
/// enough to follow a rate that changed within the classifier's window.
pub const IN_FLIGHT_S: f64 = 1.0;
pub const IN_FLIGHT_MIN_BINS: usize = 3;

/// Most bins a window may hold (`window_s * 1000 / bin_ms`), which bounds a flow's memory.
pub const MAX_BINS: usize = 600;

/// What a flow measured of its path over its last window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Features {
    pub rate_iqr: f64,
    pub rtt_iqr: f64,
    pub inflation: f64,
    pub loss: f64,
    pub busy_rate_iqr: f64,
    pub busy_frac: f64,
}

impl Features {
    pub fn as_array(&self) -> [f64; 6] {
        [
            self.rate_iqr,
            self.rtt_iqr,
            self.inflation,
            self.loss,
            self.busy_rate_iqr,
            self.busy_frac,
        ]
    }
}

/// One linear rule: weights in [`FEATURES`] order and a bias.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub weights: Vec<f64>,
    pub bias: f64,
}

/// The compression every feature goes through before its weight.
pub fn squash(x: f64) -> f64 {
    (10.0 * x.max(0.0)).ln_1p()
}

fn check_rule(at: &str, weights: &[f64], bias: f64) -> Result<(), String> {
    if weights.len() != FEATURES.len() {
        return Err(format!(
            "classifier{at} has {} weights for {} features",
            weights.len(),
            FEATURES.len()
        ));
    }
    for (i, w) in weights.iter().enumerate() {
        if !(w.is_finite() && w.abs() <= 1e6) {
            return Err(format!(
                "classifier{at} weight of {} is {w}: give -1e6 to 1e6",
                FEATURES[i]
            ));
        }
    }
    if !(bias.is_finite() && bias.abs() <= 1e6) {
        return Err(format!("classifier{at} bias is {bias}: give -1e6 to 1e6"));
    }
    Ok(())
}

/// The classifier as the table gives it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Classifier {
    /// Bin length (ms of datapath time).
    pub bin_ms: f64,
    /// Window the features are computed over (s).
    pub window_s: f64,
    /// First classification after this much of the flow (s).
    pub min_s: f64,
    /// A later change of class needs this long of consecutive bins saying so (s).
    pub hold_s: f64,
    /// Feature names, in [`FEATURES`] order (checked, so a table fitted on other features is
    /// refused rather than misread).
    pub features: Vec<String>,
    /// The rule for flows whose algorithm has none in `by_alg`.
    pub weights: Vec<f64>,
    pub bias: f64,
    /// Rules by the algorithm running when the flow is classified.
    #[serde(default)]
    pub by_alg: std::collections::BTreeMap<String, Rule>,
    /// Class when the score is above 0.
    pub above: String,
    /// Class otherwise.
    pub below: String,
}

impl Classifier {
    /// Check every number; the error says which and what is allowed.
    pub fn validate(&self) -> Result<(), String> {
        let in_range = |name: &str, v: f64, lo: f64, hi: f64| {
            if v.is_finite() && (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(format!("classifier {name} is {v}: give {lo} to {hi}"))
            }
        };
        in_range("bin_ms", self.bin_ms, 10.0, 10_000.0)?;
        in_range("window_s", self.window_s, 0.1, 600.0)?;
        in_range("min_s", self.min_s, 0.1, 3600.0)?;
        in_range("hold_s", self.hold_s, 0.0, 3600.0)?;
        if self.window_s * 1e3 / self.bin_ms > MAX_BINS as f64 {
            return Err(format!(
                "classifier window_s / bin_ms is {} bins: at most {MAX_BINS}",
                (self.window_s * 1e3 / self.bin_ms).ceil()
            ));
        }
        if self.window_s * 1e3 < 2.0 * self.bin_ms {
            return Err("classifier window_s must hold at least two bins of bin_ms".into());
        }
        if self.features != FEATURES {
            return Err(format!(
                "classifier features are {:?}: this agent measures {FEATURES:?}, in that order",
                self.features
            ));
        }
        check_rule("", &self.weights, self.bias)?;
        if self.by_alg.len() > 64 {
            return Err(format!(
                "classifier has rules for {} algorithms: at most 64",
                self.by_alg.len()
            ));
        }
        for (alg, r) in &self.by_alg {
            if alg.is_empty() || alg.len() > 64 {
                return Err("classifier by_alg names must be 1 to 64 bytes".into());
            }
            check_rule(&format!(" rule for {alg:?}"), &r.weights, r.bias)?;
        }
        if self.above == self.below {
            return Err(format!(
                "classifier above and below are both {:?}: give two classes",
                self.above
            ));
        }
        Ok(())
    }

    /// The score of `f` for a flow running `alg` (> 0: `above`).
    pub fn score(&self, f: &Features, alg: &str) -> f64 {
        let (weights, bias) = match self.by_alg.get(alg) {
            Some(r) => (&r.weights, r.bias),
            None => (&self.weights, self.bias),
        };
        bias + weights
            .iter()
            .zip(f.as_array())
            .map(|(w, x)| w * squash(x))
            .sum::<f64>()
    }

    /// The class a score says.
    pub fn class_of(&self, score: f64) -> &str {
        if score > 0.0 {
            &self.above
        } else {
            &self.below
        }
    }

    fn bins(&self) -> usize {
        ((self.window_s * 1e3 / self.bin_ms).round() as usize).clamp(2, MAX_BINS)
    }
}

#[derive(Debug, Clone, Copy)]
struct Bin {
    /// bytes/s
    rate: f64,
    /// mean RTT of the bin's samples (µs), if any
    rtt: Option<f64>,
    lost: u64,
    acked_pkts: f64,
}

/// One flow's measurements: fed every report, bounded by [`MAX_BINS`].
#[derive(Debug, Clone)]
pub struct PathMeter {
    bin_us: u64,
    keep: usize,
    mss: f64,
    bins: VecDeque<Bin>,
    // the bin being filled
    cur_us: u64,
    cur_bytes: u64,
    cur_rtt_sum: f64,
    cur_rtt_n: u64,
    cur_lost: u64,
    /// datapath time seen (µs)
    elapsed_us: u64,
    min_rtt_us: Option<u64>,
    /// Where the quartiles are sorted (at most [`MAX_BINS`] values).
    scratch: Vec<f64>,
}

impl PathMeter {
    pub fn new(c: &Classifier, mss: u32) -> Self {
        let keep = c.bins();
        Self {
            bin_us: (c.bin_ms * 1e3) as u64,
            keep,
            mss: f64::from(mss.max(1)),
            bins: VecDeque::with_capacity(keep),
            cur_us: 0,
            cur_bytes: 0,
            cur_rtt_sum: 0.0,
            cur_rtt_n: 0,
            cur_lost: 0,
            elapsed_us: 0,
            min_rtt_us: None,
            scratch: Vec::with_capacity(keep),
        }
    }

    /// Seconds of datapath time measured.
    pub fn elapsed_s(&self) -> f64 {
        self.elapsed_us as f64 / 1e6
    }

    /// Fold one (sanitized) report in; returns how many bins it closed.
    pub fn observe(&mut self, iv: &Interval) -> usize {
        if let Some(m) = iv.rtt_min_us {
            self.min_rtt_us = Some(self.min_rtt_us.map_or(m, |x| x.min(m)));
        }
        if let Some(r) = iv.rtt_mean_us {
            let n = iv.rtt_samples.max(1);
            self.cur_rtt_sum += r * n as f64;
            self.cur_rtt_n += n;
        }
        self.cur_bytes = self.cur_bytes.saturating_add(iv.acked_bytes);
        self.cur_lost = self.cur_lost.saturating_add(iv.lost_pkts);
        // an interval longer than a bin closes it (and the empty bins after it count as the
        // interval's rate: the bytes are spread over its length)
        self.cur_us = self.cur_us.saturating_add(iv.interval_us);
        self.elapsed_us = self.elapsed_us.saturating_add(iv.interval_us);
        if self.cur_us < self.bin_us || self.bin_us == 0 {
            return 0;
        }
        let rate = self.cur_bytes as f64 / (self.cur_us as f64 / 1e6);
        let rtt = (self.cur_rtt_n > 0).then(|| self.cur_rtt_sum / self.cur_rtt_n as f64);
        let n = ((self.cur_us / self.bin_us) as usize).clamp(1, self.keep);
        let acked = self.cur_bytes as f64 / self.mss / n as f64;
        for i in 0..n {
            if self.bins.len() == self.keep {
                self.bins.pop_front();
            }
            self.bins.push_back(Bin {
                rate,
                rtt,
                lost: if i == 0 { self.cur_lost } else { 0 },
                acked_pkts: acked,
            });
        }
        self.cur_us = 0;
        self.cur_bytes = 0;
        self.cur_rtt_sum = 0.0;
        self.cur_rtt_n = 0;
        self.cur_lost = 0;
        n
    }

    /// Forget the bins (not the min RTT, a property of the path): after a switch the window
    /// fills again under the new algorithm, whose rule reads it.
    pub fn restart(&mut self) {
        self.bins.clear();
        self.cur_us = 0;
        self.cur_bytes = 0;
        self.cur_rtt_sum = 0.0;
        self.cur_rtt_n = 0;
        self.cur_lost = 0;
    }

    /// The smallest RTT the flow has seen (µs).
    pub fn min_rtt_us(&self) -> Option<u64> {
        self.min_rtt_us
    }

    /// The mean delivery rate over the bins kept (bytes/s); None before the first bin.
    pub fn recent_rate_bps(&self) -> Option<f64> {
        if self.bins.is_empty() {
            return None;
        }
        let (m, _) = mean_sd(self.bins.iter().map(|b| b.rate));
        (m > 0.0).then_some(m)
    }

    /// What the flow keeps in flight now (bytes), for the window a switch hands over: the
    /// median, over the bins of the last [`IN_FLIGHT_S`] (at least [`IN_FLIGHT_MIN_BINS`]),
    /// of each bin's delivery rate times its mean RTT (Little's law). The latest second, not
    /// the whole window: a rate that changed within the window (BBR out of its stale-min-RTT
    /// cap, a capacity that rose or fell) is the new one, where the window's mean lags; the
    /// median, not the last bin: one bin of a momentary cut (BBR's 200 ms PROBE_RTT, a loss
    /// recovery) is not handed over. None before a bin with an RTT sample.
    pub fn recent_in_flight_bytes(&mut self) -> Option<f64> {
        let n = ((IN_FLIGHT_S * 1e6 / self.bin_us.max(1) as f64).ceil() as usize)
            .max(IN_FLIGHT_MIN_BINS);
        let buf = &mut self.scratch;
        buf.clear();
        buf.extend(
            self.bins
                .iter()
                .rev()
                .take(n)
                .filter_map(|b| b.rtt.map(|r| b.rate * r / 1e6)),
        );
        if buf.is_empty() {
            return None;
        }
        buf.sort_by(f64::total_cmp);
        let m = quantile(buf, 0.5);
        (m > 0.0).then_some(m)
    }

    /// The features over the window, once it is full. (`&mut`: the quartiles sort in a
    /// buffer the meter keeps, so a decision allocates nothing.)
    pub fn features(&mut self) -> Option<Features> {
        if self.bins.len() < self.keep {
            return None;
        }
        let buf = &mut self.scratch;
        let rate_iqr = spread(buf, self.bins.iter().map(|b| b.rate));
        let rtt_iqr = spread(buf, self.bins.iter().filter_map(|b| b.rtt));
        let (rm, _) = mean_sd(self.bins.iter().filter_map(|b| b.rtt));
        let inflation = match self.min_rtt_us {
            Some(min) if min > 0 && rm > 0.0 => (rm / min as f64 - 1.0).max(0.0),
            _ => 0.0,
        };
        let lost: u64 = self.bins.iter().map(|b| b.lost).sum();
        let acked: f64 = self.bins.iter().map(|b| b.acked_pkts).sum();
        let loss = if lost > 0 {
            lost as f64 / (lost as f64 + acked)
        } else {
            0.0
        };
        // no minimum RTT: no bin is busy
        let at = self
            .min_rtt_us
            .filter(|m| *m > 0)
            .map_or(f64::INFINITY, |m| (1.0 + BUSY_QUEUE) * m as f64);
        let busy = self
            .bins
            .iter()
            .filter(|b| b.rtt.is_some_and(|r| r >= at))
            .map(|b| b.rate);
        let n_busy = busy.clone().count();
        let busy_frac = n_busy as f64 / self.bins.len() as f64;
        let busy_rate_iqr = if n_busy >= MIN_BUSY_BINS {
            spread(buf, busy)
        } else {
            0.0
        };
        Some(Features {
            rate_iqr,
            rtt_iqr,
            inflation,
            loss,
            busy_rate_iqr,
            busy_frac,
        })
    }
}

/// `(q75 − q25) / q50` of `values` (linear interpolation between order statistics), sorted
/// in `buf`; 0 for fewer than two values or a zero median.
fn spread(buf: &mut Vec<f64>, values: impl Iterator<Item = f64>) -> f64 {
    buf.clear();
    buf.extend(values);
    let xs = buf;
    if xs.len() < 2 {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    let m = quantile(xs, 0.5);
    if m > 0.0 {
        (quantile(xs, 0.75) - quantile(xs, 0.25)) / m
    } else {
        0.0
    }
}

/// The `p` quantile of sorted, non-empty `xs` (linear interpolation between order
/// statistics).
fn quantile(xs: &[f64], p: f64) -> f64 {
    let at = p * (xs.len() - 1) as f64;
    let (i, f) = (at.floor() as usize, at.fract());
    let next = xs[(i + 1).min(xs.len() - 1)];
    xs[i] + f * (next - xs[i])
}

fn mean_sd(xs: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut n, mut s, mut s2) = (0.0, 0.0, 0.0);
    for x in xs {
        n += 1.0;
        s += x;
        s2 += x * x;
    }
    if n == 0.0 {
        return (0.0, 0.0);
    }
    let m = s / n;
    (m, (s2 / n - m * m).max(0.0).sqrt())
}

/// A flow's class over time: the first decision after `min_s`, later changes after `hold_s`
/// of agreeing bins.
#[derive(Debug, Clone)]
pub struct PathClass {
    pub classifier: Classifier,
    pub meter: PathMeter,
    class: Option<String>,
    /// Consecutive bins whose class differs from `class`.
    against: usize,
    hold_bins: usize,
}

/// A decided class and what it was decided on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Classified {
    pub class: String,
    pub features: Features,
    pub score: f64,
    /// Flow time of the decision (s, datapath clock).
    pub at_s: f64,
}

impl PathClass {
    pub fn new(classifier: Classifier, mss: u32) -> Self {
        let meter = PathMeter::new(&classifier, mss);
        let hold_bins = (classifier.hold_s * 1e3 / classifier.bin_ms).ceil() as usize;
        Self {
            classifier,
            meter,
            class: None,
            against: 0,
            hold_bins: hold_bins.max(1),
        }
    }

    pub fn class(&self) -> Option<&str> {
        self.class.as_deref()
    }

    /// The flow changed algorithm: the features are measured afresh under the new one (a
    /// full window before the class can change again).
    pub fn switched(&mut self) {
        self.meter.restart();
        self.against = 0;
    }

    /// Fold a report of a flow running `alg` in; `Some` when the flow's class is decided for
    /// the first time or changes.
    pub fn observe(&mut self, iv: &Interval, alg: &str) -> Option<Classified> {
        let closed = self.meter.observe(iv);
        if closed == 0 || self.meter.elapsed_s() < self.classifier.min_s {
            return None;
        }
        let f = self.meter.features()?;
        let score = self.classifier.score(&f, alg);
        let now = self.classifier.class_of(score).to_owned();
        let decided = match &self.class {
            None => true,
            Some(c) if *c == now => {
                self.against = 0;
                false
            }
            Some(_) => {
                self.against += closed;
                self.against >= self.hold_bins
            }
        };
        if !decided {
            return None;
        }
        self.against = 0;
        self.class = Some(now.clone());
        Some(Classified {
            class: now,
            features: f,
            score,
            at_s: self.meter.elapsed_s(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn classifier() -> Classifier {
        Classifier {
            bin_ms: 100.0,
            window_s: 1.0,
            min_s: 2.0,
            hold_s: 0.5,
            features: FEATURES.iter().map(|s| s.to_string()).collect(),
            // rate_iqr above 0.2: g(0.2) = ln 3
            weights: vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            bias: -(3.0f64.ln()),
            by_alg: Default::default(),
            above: "variable".into(),
            below: "constant".into(),
        }
    }

    fn report(bytes: u64, rtt_us: u64, us: u64) -> Interval {
        Interval {
            acked_bytes: bytes,
            rtt_min_us: Some(rtt_us),
            rtt_mean_us: Some(rtt_us as f64),
            rtt_samples: 1,
            interval_us: us,
            ..Default::default()
        }
    }

    #[test]
    fn features_measure_rate_variability_rtt_and_loss() {
        let c = classifier();
        let mut m = PathMeter::new(&c, 1000);
        // 10 ms reports: 1 s of 100 kB/s bins at 50 ms RTT, then alternate bins at 50 and
        // 150 kB/s with RTT 60/40 ms and one loss per 100 packets
        for _ in 0..100 {
            m.observe(&report(1000, 50_000, 10_000));
        }
        let f = m.features().unwrap();
        assert!(f.rate_iqr < 1e-9 && f.rtt_iqr < 1e-9 && f.inflation < 1e-9 && f.loss == 0.0);
        for b in 0..10 {
            let (bytes, rtt) = if b % 2 == 0 {
                (500, 60_000)
            } else {
                (1500, 40_000)
            };
            for i in 0..10 {
                let mut r = report(bytes, rtt, 10_000);
                r.lost_pkts = u64::from(i == 0 && bytes == 1500);
                m.observe(&r);
            }
        }
        let f = m.features().unwrap();
        // five bins at 50 and five at 150 kB/s: quartiles 50 and 150, median 100
        assert!((f.rate_iqr - 1.0).abs() < 1e-9, "{f:?}");
        // RTT 40 and 60 ms: (60 - 40) / 50
        assert!((f.rtt_iqr - 0.4).abs() < 1e-9, "{f:?}");
        // mean RTT 50 ms over a 40 ms minimum
        assert!((f.inflation - 0.25).abs() < 1e-9, "{f:?}");
        // 5 lost, 100 packets acked (10 bins x 10 kB / 1000 B)
        assert!((f.loss - 5.0 / 105.0).abs() < 1e-9, "{f:?}");
        // the busy bins (RTT 60 ms, a queue over the 40 ms minimum) all delivered 50 kB/s:
        // the sender's own rate changes, the path's capacity does not
        assert!((f.busy_frac - 0.5).abs() < 1e-9, "{f:?}");
        assert!(f.busy_rate_iqr < 1e-9, "{f:?}");
        // a queue in every bin and a capacity that changes: the busy bins show it
        for b in 0..10 {
            let bytes = if b % 2 == 0 { 500 } else { 1500 };
            for _ in 0..10 {
                m.observe(&report(bytes, 60_000, 10_000));
            }
        }
        let f = m.features().unwrap();
        assert!((f.busy_frac - 1.0).abs() < 1e-9, "{f:?}");
        assert!((f.busy_rate_iqr - 1.0).abs() < 1e-9, "{f:?}");
    }

    #[test]
    fn one_dip_does_not_move_the_quartiles() {
        // BBR's PROBE_RTT: one 200 ms bin at a tenth of the rate among steady ones
        let c = classifier();
        let mut m = PathMeter::new(&c, 1000);
        for i in 0..100 {
            let bytes = if (50..60).contains(&i) { 100 } else { 1000 };
            m.observe(&report(bytes, 50_000, 10_000));
        }
        assert!(m.features().unwrap().rate_iqr < 1e-9);
    }

    #[test]
    fn the_window_in_flight_is_the_last_seconds_not_the_whole_windows() {
        // 200 ms bins, a 3 s window (the guest test's table): 2 s at 3 MB/s, then 1 s at
        // 6 MB/s, all at 100 ms RTT; the flow now keeps 600 kB in flight (the window's mean
        // rate times its mean RTT says 400 kB)
        let c = Classifier {
            bin_ms: 200.0,
            window_s: 3.0,
            ..classifier()
        };
        let mut m = PathMeter::new(&c, 1000);
        assert_eq!(m.recent_in_flight_bytes(), None);
        for i in 0..300 {
            let bytes = if i < 200 { 30_000 } else { 60_000 };
            m.observe(&report(bytes, 100_000, 10_000));
        }
        let f = m.recent_in_flight_bytes().unwrap();
        assert!((f - 600_000.0).abs() < 1.0, "{f}");
        // one 200 ms bin of a momentary cut (PROBE_RTT's 4 packets) is not handed over
        for i in 0..20 {
            let bytes = if i < 10 { 60_000 } else { 600 };
            m.observe(&report(bytes, 100_000, 10_000));
        }
        let f = m.recent_in_flight_bytes().unwrap();
        assert!((f - 600_000.0).abs() < 1.0, "{f}");
        // a rate that fell a second ago is the new one
        for _ in 0..100 {
            m.observe(&report(20_000, 120_000, 10_000));
        }
        let f = m.recent_in_flight_bytes().unwrap();
        assert!((f - 240_000.0).abs() < 1.0, "{f}");
    }

    #[test]
    fn a_report_longer_than_a_bin_fills_the_bins_it_spans() {
        let c = classifier();
        let mut m = PathMeter::new(&c, 1000);
        assert_eq!(m.observe(&report(30_000, 50_000, 300_000)), 3);
        assert_eq!(m.observe(&report(100_000, 50_000, 2_000_000_000)), 10);
        let f = m.features().unwrap();
        assert!(f.rate_iqr < 1e-9, "{f:?}");
        assert!(m.bins.len() <= c.bins());
    }

    #[test]
    fn the_class_is_decided_after_min_s_and_changes_only_after_hold_s() {
        let mut p = PathClass::new(classifier(), 1000);
        let steady = report(1000, 50_000, 10_000);
        let mut first = None;
        for i in 0..300 {
            if let Some(c) = p.observe(&steady, "x") {
                first = Some((i, c));
                break;
            }
        }
        let (i, c) = first.expect("never classified");
        assert_eq!(c.class, "constant");
        assert_eq!(i, 199, "first decision at min_s = 2 s of 10 ms reports");
        // a variable stretch: rate alternating by bins; the class changes only once the
        // window says so for hold_s = 5 bins in a row
        let mut changed_at = None;
        for b in 0..40 {
            let bytes = if b % 2 == 0 { 200 } else { 1800 };
            for _ in 0..10 {
                if let Some(c) = p.observe(&report(bytes, 50_000, 10_000), "x") {
                    changed_at.get_or_insert((b, c));
                }
            }
        }
        let (b, c) = changed_at.expect("never changed");
        assert_eq!(c.class, "variable");
        assert!(c.score > 0.0);
        // the window's quartiles move once 5 of its 10 bins are variable (bin 4), and the
        // class changes after 5 bins in a row say so
        assert_eq!(b, 8, "changed at bin {b}");
        // one bin of the other class does not change it back
        for _ in 0..10 {
            assert!(p.observe(&steady, "x").is_none());
        }
        assert_eq!(p.class(), Some("variable"));
    }

    #[test]
    fn bad_classifiers_are_refused_naming_the_number() {
        type Break = fn(&mut Classifier);
        let cases: [(Break, &str); 8] = [
            (|c| c.bin_ms = 0.0, "bin_ms is 0"),
            (|c| c.window_s = f64::NAN, "window_s is NaN"),
            (|c| c.window_s = 100.0, "at most 600"),
            (|c| c.weights.pop().map(drop).unwrap_or(()), "5 weights"),
            (|c| c.features.swap(0, 1), "this agent measures"),
            (|c| c.weights[2] = f64::INFINITY, "weight of inflation"),
            (
                |c| {
                    c.by_alg.insert(
                        "bbr".into(),
                        Rule {
                            weights: vec![0.0; 6],
                            bias: f64::NAN,
                        },
                    );
                },
                "rule for \"bbr\" bias is NaN",
            ),
            (|c| c.below = c.above.clone(), "give two classes"),
        ];
        assert!(classifier().validate().is_ok());
        for (break_it, want) in cases {
            let mut c = classifier();
            break_it(&mut c);
            let e = c.validate().unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }
}
