//! The flow's preference vector `w = <throughput, latency, loss>`.
//!
//! Every flow carries one (MOCC conditions its policy on it; the other algorithms may use it
//! to weight their rewards or ignore it). A valid vector has three finite components in
//! `[0, 1]` that sum to 1 within `1e-6`. Anything else is rejected with an error that names
//! the problem and the fix, so a bad `--w` or scenario `w` never reaches an algorithm.

use std::fmt;
use std::str::FromStr;

/// Tolerance on `thr + lat + loss == 1`.
pub const SUM_TOLERANCE: f64 = 1e-6;

/// A validated preference vector. Construct it with [`Preference::new`] or parse it from
/// `"a,b,c"`; the fields are private so an invalid vector cannot exist.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Preference {
    thr: f64,
    lat: f64,
    loss: f64,
}

/// Why a preference vector was rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PreferenceError {
    #[error("preference vector needs 3 comma-separated numbers <throughput,latency,loss>, got {0} (e.g. 0.4,0.5,0.1)")]
    WrongLength(usize),
    #[error(
        "preference component {index} ({name}) is not a number: {text:?} (use e.g. 0.4,0.5,0.1)"
    )]
    NotANumber {
        index: usize,
        name: &'static str,
        text: String,
    },
    #[error("preference component {index} ({name}) is {value}, which is not finite: every weight must be a finite number in [0,1]")]
    NotFinite {
        index: usize,
        name: &'static str,
        value: f64,
    },
    #[error("preference component {index} ({name}) is {value}, outside [0,1]: every weight must lie in [0,1]")]
    OutOfRange {
        index: usize,
        name: &'static str,
        value: f64,
    },
    #[error("preference weights sum to {sum}, not 1: scale them so throughput+latency+loss = 1 (e.g. 0.4,0.5,0.1)")]
    BadSum { sum: f64 },
}

const NAMES: [&str; 3] = ["throughput", "latency", "loss"];

impl Preference {
    /// Validate and build a preference vector.
    pub fn new(thr: f64, lat: f64, loss: f64) -> Result<Self, PreferenceError> {
        let v = [thr, lat, loss];
        for (index, &value) in v.iter().enumerate() {
            let name = NAMES[index];
            if !value.is_finite() {
                return Err(PreferenceError::NotFinite { index, name, value });
            }
            if !(0.0..=1.0).contains(&value) {
                return Err(PreferenceError::OutOfRange { index, name, value });
            }
        }
        let sum = thr + lat + loss;
        if (sum - 1.0).abs() > SUM_TOLERANCE {
            return Err(PreferenceError::BadSum { sum });
        }
        Ok(Self { thr, lat, loss })
    }

    /// Validate a slice of exactly three weights.
    pub fn from_slice(v: &[f64]) -> Result<Self, PreferenceError> {
        match v {
            [a, b, c] => Self::new(*a, *b, *c),
            _ => Err(PreferenceError::WrongLength(v.len())),
        }
    }

    pub fn thr(&self) -> f64 {
        self.thr
    }
    pub fn lat(&self) -> f64 {
        self.lat
    }
    pub fn loss(&self) -> f64 {
        self.loss
    }
    pub fn as_array(&self) -> [f64; 3] {
        [self.thr, self.lat, self.loss]
    }
}

impl Default for Preference {
    /// The portfolio's default preference, the headline `--w 0.4,0.5,0.1`.
    fn default() -> Self {
        Self {
            thr: 0.4,
            lat: 0.5,
            loss: 0.1,
        }
    }
}

impl FromStr for Preference {
    type Err = PreferenceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        if parts.len() != 3 {
            return Err(PreferenceError::WrongLength(parts.len()));
        }
        let mut v = [0.0f64; 3];
        for (index, text) in parts.iter().enumerate() {
            v[index] = text
                .parse::<f64>()
                .map_err(|_| PreferenceError::NotANumber {
                    index,
                    name: NAMES[index],
                    text: (*text).to_owned(),
                })?;
        }
        Self::from_slice(&v)
    }
}

impl fmt::Display for Preference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{},{},{}", self.thr, self.lat, self.loss)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_valid_vectors() {
        let w: Preference = "0.4,0.5,0.1".parse().unwrap();
        assert_eq!(w.as_array(), [0.4, 0.5, 0.1]);
        let w: Preference = " 1, 0 ,0".parse().unwrap();
        assert_eq!(w.thr(), 1.0);
        // display round-trips
        let back: Preference = w.to_string().parse().unwrap();
        assert_eq!(back, w);
    }

    #[test]
    fn rejects_bad_vectors_with_named_problem() {
        assert_eq!(
            "0.4,0.5".parse::<Preference>(),
            Err(PreferenceError::WrongLength(2))
        );
        assert!(matches!(
            "1,1,1".parse::<Preference>(),
            Err(PreferenceError::BadSum { .. })
        ));
        assert!(matches!(
            "nan,0,1".parse::<Preference>(),
            Err(PreferenceError::NotFinite { index: 0, .. })
        ));
        assert!(matches!(
            "inf,0,1".parse::<Preference>(),
            Err(PreferenceError::NotFinite { .. })
        ));
        assert!(matches!(
            "1.5,-0.5,0".parse::<Preference>(),
            Err(PreferenceError::OutOfRange { index: 0, .. })
        ));
        assert!(matches!(
            "a,0,1".parse::<Preference>(),
            Err(PreferenceError::NotANumber { index: 0, .. })
        ));
        let msg = "1,1,1".parse::<Preference>().unwrap_err().to_string();
        assert!(msg.contains("sum to 3"), "{msg}");
    }

    #[test]
    fn sum_tolerance_is_1e6() {
        assert!(Preference::new(0.3333333, 0.3333333, 0.3333334).is_ok());
        assert!(Preference::new(0.33, 0.33, 0.33).is_err());
    }
}
