//! Iris's queue model (eq. 3, 6) and the least-squares fit of `Δrtt = k·(x − r) + b` (eq. 1, 2;
//! §V-B).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FitRejection {
    TooFewSamples,
    IllConditioned,
    Uncorrelated,
    NonPositiveSlope,
}

/// A least-squares fit of `Δrtt = k·(x − r) + b`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    /// Slope (ms per packet/s).
    pub k: f64,
    /// Intercept (ms).
    pub b: f64,
    /// Pearson correlation of the samples.
    pub correlation: f64,
    pub samples: usize,
}

/// Least squares of `y = k·u + b` over `(u, y)` samples, with the guards of the module
/// header. `u` in packets/s, `y` in ms.
pub fn fit_k(
    samples: impl IntoIterator<Item = (f64, f64)>,
    min_samples: usize,
    max_condition: f64,
    min_correlation: f64,
) -> Result<Fit, FitRejection> {
    let (mut n, mut su, mut sy, mut suu, mut suy, mut syy) = (0usize, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (u, y) in samples {
        if !u.is_finite() || !y.is_finite() {
            continue;
        }
        n += 1;
        su += u;
        sy += y;
        suu += u * u;
        suy += u * y;
        syy += y * y;
    }
    if n < min_samples.max(2) {
        return Err(FitRejection::TooFewSamples);
    }
    let nf = n as f64;
    let (mu, my) = (su / nf, sy / nf);
    let var_u = (suu / nf - mu * mu).max(0.0);
    let var_y = (syy / nf - my * my).max(0.0);
    let cov = suy / nf - mu * my;
    // normalised normal matrix [[1, m],[m, 1]] with m = mean(u)/rms(u): eigenvalues 1 ± |m|
    let ms = suu / nf;
    if ms <= 0.0 || var_u <= 1e-12 * ms.max(1e-300) {
        return Err(FitRejection::IllConditioned);
    }
    let m = (mu / ms.sqrt()).abs().min(1.0);
    let cond = (1.0 + m) / (1.0 - m).max(1e-300);
    if !cond.is_finite() || cond > max_condition {
        return Err(FitRejection::IllConditioned);
    }
    let correlation = if var_y > 0.0 {
        cov / (var_u * var_y).sqrt()
    } else {
        0.0
    };
    let k = cov / var_u;
    if !k.is_finite() || k <= 0.0 {
        return Err(FitRejection::NonPositiveSlope);
    }
    if correlation < min_correlation {
        return Err(FitRejection::Uncorrelated);
    }
    Ok(Fit {
        k,
        b: my - k * mu,
        correlation,
        samples: n,
    })
}

/// Queue-load objective `U = (x·(rtt − T) − B)/M` (eq. 3 with eq. 6's expansion):
/// `x` in packets/s, `rtt`, `T` in ms, `B` in packets.
pub fn queue_load_objective(x_pps: f64, rtt_ms: f64, target_ms: f64, b_pkts: f64, m: f64) -> f64 {
    (x_pps * (rtt_ms - target_ms) / 1000.0 - b_pkts) / m
}

/// Expected RTT change of the next epoch `d = −δ·tanh(U)` (eq. 6), ms.
pub fn expected_rtt_change(u: f64, delta_ms: f64) -> f64 {
    -delta_ms * u.tanh()
}
