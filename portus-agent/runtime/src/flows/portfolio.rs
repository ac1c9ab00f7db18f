//! The preference portfolio: a flow that asks for `ccp_auto` gets the algorithm whose measured
//! operating point best serves its preference `w`.
//!
//! The table (`models/portfolio.json`, written by `python -m ccp_train.portfolio build` from
//! the evaluation harness's `tune` runs of the `preferences` suite) holds, per algorithm, the
//! mean of MOCC's eq. 2 objectives `o = (utilization, min(RTT_base/RTT_mean, 1), 1 - loss)`.
//! A flow's choice is
//!
//! ```text
//!   alg(w) = argmax_a  w · o_a        (ties: the name first in alphabetical order)
//! ```
//!
//! over the table's algorithms that this agent runs. An algorithm whose operating point moves
//! with `w` (MOCC) has one entry per landmark `w`; the entry nearest the flow's `w` (L1) stands
//! for it. Because eq. 2 is linear in `o`, `w · o_a` is the algorithm's mean tune utility for
//! `w`: the choice is the algorithm that did best on tune for that preference.
//!
//! The agent reads the table with the models (start-up and SIGHUP; a bad new table keeps the
//! old one). Every number is checked: a table is refused, with the reason, rather than half
//! used. `choose` is also implemented in Python (`ccp_train.portfolio.choose`) for reports;
//! `train/tests/test_portfolio.py` checks both make the same choices.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use ccp_algs::Preference;
use serde::Deserialize;

use crate::flows::pathclass::Classifier;

/// The table format this agent reads.
pub const VERSION: u32 = 1;
/// The table's file name in the models folder.
pub const FILE: &str = "portfolio.json";
/// Largest table file read (bytes): a table has tens of entries.
pub const MAX_BYTES: u64 = 1 << 20;
/// Most entries per class.
pub const MAX_ENTRIES: usize = 1024;

/// Why a table was refused.
#[derive(Debug, thiserror::Error)]
pub enum PortfolioError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: ccp_files::ReadError,
    },
    #[error("{path} is not a portfolio table: {source} (rebuild it with `python -m ccp_train.portfolio build`)")]
    Parse {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path}: {what} (rebuild it with `python -m ccp_train.portfolio build`)")]
    Invalid { path: String, what: String },
}

#[derive(Debug, Deserialize)]
struct RawTable {
    version: u32,
    default_class: String,
    classes: BTreeMap<String, Vec<RawEntry>>,
    /// How a `ccp_auto` flow learns its path's class ([`crate::flows::pathclass`]); without
    /// one a flow keeps the default class's choice.
    #[serde(default)]
    classifier: Option<Classifier>,
}

#[derive(Debug, Deserialize)]
struct RawEntry {
    alg: String,
    w: Option<[f64; 3]>,
    o: [f64; 3],
}

/// One algorithm's operating point.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub alg: String,
    /// The landmark preference this point was measured at (None: the algorithm ignores `w`).
    pub w: Option<Preference>,
    /// Mean objectives (throughput, latency, loss), each in [0, 1].
    pub o: [f64; 3],
}

/// A validated table.
#[derive(Debug, Clone, PartialEq)]
pub struct Portfolio {
    default_class: String,
    classes: BTreeMap<String, Vec<Entry>>,
    classifier: Option<Classifier>,
}

/// A choice and why: the flow log records it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Choice {
    pub alg: String,
    /// `w · o` of the chosen entry.
    pub score: f64,
    /// The landmark the chosen entry was measured at, if it has one.
    pub landmark: Option<Preference>,
    /// The best other algorithm and its score.
    pub runner_up: Option<(String, f64)>,
}

/// Is there anything at `p` (not following symlinks)?
fn present(p: &Path) -> Result<bool, PortfolioError> {
    ccp_files::present(p).map_err(|e| PortfolioError::Read {
        path: p.display().to_string(),
        source: e.into(),
    })
}

fn l1(a: &[f64; 3], b: &[f64; 3]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum()
}

impl Portfolio {
    /// Read and validate a table.
    pub fn load(path: &Path) -> Result<Self, PortfolioError> {
        let p = path.display().to_string();
        // a regular file only, its size checked before reading (a FIFO hung start-up and
        // the signal loop; a link to /dev/zero grew memory without bound)
        let text = ccp_files::read_regular_to_string(path, MAX_BYTES).map_err(|source| {
            PortfolioError::Read {
                path: p.clone(),
                source,
            }
        })?;
        Self::parse(&text, &p)
    }

    /// Validate a table's text; `path` names it in errors.
    pub fn parse(text: &str, path: &str) -> Result<Self, PortfolioError> {
        let raw: RawTable = serde_json::from_str(text).map_err(|source| PortfolioError::Parse {
            path: path.to_owned(),
            source,
        })?;
        let bad = |what: String| PortfolioError::Invalid {
            path: path.to_owned(),
            what,
        };
        if raw.version != VERSION {
            return Err(bad(format!(
                "version {} (this agent reads version {VERSION})",
                raw.version
            )));
        }
        let mut classes = BTreeMap::new();
        for (name, entries) in raw.classes {
            if entries.is_empty() || entries.len() > MAX_ENTRIES {
                return Err(bad(format!(
                    "class {name:?} has {} entries: give 1 to {MAX_ENTRIES}",
                    entries.len()
                )));
            }
            let mut out = Vec::with_capacity(entries.len());
            for (i, e) in entries.into_iter().enumerate() {
                let at = format!("class {name:?} entry {i} ({:?})", e.alg);
                if e.alg.is_empty() || e.alg.len() > 64 {
                    return Err(bad(format!("{at}: algorithm name must be 1 to 64 bytes")));
                }
                if let Some(k) = e.o.iter().position(|x| !(0.0..=1.0).contains(x)) {
                    return Err(bad(format!(
                        "{at}: objective {k} is {}, outside [0, 1]",
                        e.o[k]
                    )));
                }
                let w = match e.w {
                    None => None,
                    Some([a, b, c]) => Some(
                        Preference::new(a, b, c).map_err(|err| bad(format!("{at}: w: {err}")))?,
                    ),
                };
                out.push(Entry {
                    alg: e.alg,
                    w,
                    o: e.o,
                });
            }
            classes.insert(name, out);
        }
        if !classes.contains_key(&raw.default_class) {
            return Err(bad(format!(
                "default_class {:?} is not one of its classes",
                raw.default_class
            )));
        }
        if let Some(c) = &raw.classifier {
            c.validate().map_err(&bad)?;
            for side in [&c.above, &c.below] {
                if !classes.contains_key(side) {
                    return Err(bad(format!(
                        "the classifier gives class {side:?}, which the table does not have"
                    )));
                }
            }
        }
        // a class no flow can be put in is a table built for another classifier
        for name in classes.keys() {
            let measured = raw
                .classifier
                .as_ref()
                .is_some_and(|c| c.above == *name || c.below == *name);
            if *name != raw.default_class && !measured && raw.classifier.is_some() {
                return Err(bad(format!(
                    "class {name:?} cannot be measured: the classifier gives only {:?} and {:?}",
                    raw.classifier.as_ref().map_or("", |c| c.above.as_str()),
                    raw.classifier.as_ref().map_or("", |c| c.below.as_str()),
                )));
            }
        }
        Ok(Self {
            default_class: raw.default_class,
            classes,
            classifier: raw.classifier,
        })
    }

    /// The path classifier, if the table has one.
    pub fn classifier(&self) -> Option<&Classifier> {
        self.classifier.as_ref()
    }

    /// The default class's name (a flow's class before it is measured).
    pub fn default_class(&self) -> &str {
        &self.default_class
    }

    /// Every algorithm the table names must be one `runs` accepts: a table built for
    /// algorithms this agent lacks would send flows to the fallback without saying so.
    pub fn check_algorithms(&self, runs: impl Fn(&str) -> bool) -> Result<(), String> {
        if let Some(c) = &self.classifier {
            if let Some(a) = c.by_alg.keys().find(|a| !runs(a)) {
                return Err(format!(
                    "the classifier has a rule for algorithm {a:?}, which this agent does not \
                     run (give it its model, or refit with `python -m ccp_train.pathclass`)"
                ));
            }
        }
        for (class, entries) in &self.classes {
            if let Some(e) = entries.iter().find(|e| !runs(&e.alg)) {
                return Err(format!(
                    "class {class:?} names algorithm {:?}, which this agent does not run \
                     (give it its model, or rebuild the table with --algs)",
                    e.alg
                ));
            }
        }
        Ok(())
    }

    /// The entries of `class` (the default class when None or unknown).
    pub fn entries(&self, class: Option<&str>) -> &[Entry] {
        class
            .and_then(|c| self.classes.get(c))
            .or_else(|| self.classes.get(&self.default_class))
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The algorithm for `w` among those `runs` accepts; None when the table names none of
    /// them (the caller falls back to its default algorithm).
    pub fn choose(
        &self,
        w: &Preference,
        class: Option<&str>,
        runs: impl Fn(&str) -> bool,
    ) -> Option<Choice> {
        let wa = w.as_array();
        // per algorithm: its entry nearest w (distance, score, landmark)
        let mut best: BTreeMap<&str, (f64, f64, Option<Preference>)> = BTreeMap::new();
        for e in self.entries(class) {
            if !runs(&e.alg) {
                continue;
            }
            let d = e.w.map_or(0.0, |lw| l1(&lw.as_array(), &wa));
            let score = wa.iter().zip(&e.o).map(|(a, b)| a * b).sum::<f64>();
            let better = best.get(e.alg.as_str()).is_none_or(|b| d < b.0);
            if better {
                best.insert(&e.alg, (d, score, e.w));
            }
        }
        // BTreeMap order is alphabetical: a strict `>` keeps the first of equal scores
        let mut ranked: Vec<(&str, f64, Option<Preference>)> =
            best.into_iter().map(|(a, (_, s, lw))| (a, s, lw)).collect();
        let mut top = 0;
        for i in 1..ranked.len() {
            if ranked[i].1 > ranked[top].1 {
                top = i;
            }
        }
        if ranked.is_empty() {
            return None;
        }
        let (alg, score, landmark) = ranked.remove(top);
        let runner_up = ranked
            .iter()
            .fold(None::<(&str, f64)>, |acc, &(a, s, _)| match acc {
                Some((_, bs)) if bs >= s => acc,
                _ => Some((a, s)),
            })
            .map(|(a, s)| (a.to_owned(), s));
        Some(Choice {
            alg: alg.to_owned(),
            score,
            landmark,
            runner_up,
        })
    }
}

/// The agent's portfolio: the table it holds now (replaced on SIGHUP) and what a flow without
/// a preference of its own is scored with.
#[derive(Debug)]
pub struct AutoSelect {
    table: RwLock<Option<Arc<Portfolio>>>,
    /// Where the table is read from (`<models>/portfolio.json`).
    path: Option<PathBuf>,
    default_w: Preference,
    /// `--alg auto`: flows that name no algorithm (`ccp`) are chosen too.
    pub for_default: bool,
    /// The algorithms this agent runs: a table naming another is refused.
    available: Vec<String>,
}

impl AutoSelect {
    /// Read the table at `path` if there is one (a bad one is an error, and so is a name
    /// that is there but unreadable: a dangling link or a symlink loop); `for_default`
    /// needs a table.
    pub fn open(
        path: Option<PathBuf>,
        default_w: Preference,
        for_default: bool,
        available: Vec<String>,
    ) -> Result<Self, PortfolioError> {
        let table = match &path {
            Some(p) if present(p)? => Some(Arc::new(Self::load_for(p, &available)?)),
            _ => None,
        };
        if for_default && table.is_none() {
            let where_ = path
                .as_ref()
                .map_or("the models folder".to_owned(), |p| p.display().to_string());
            return Err(PortfolioError::Invalid {
                path: where_,
                what: "`--alg auto` needs a portfolio table and there is none".into(),
            });
        }
        Ok(Self {
            table: RwLock::new(table),
            path,
            default_w,
            for_default,
            available,
        })
    }

    /// Load `p` and check that this agent runs every algorithm it names.
    fn load_for(p: &Path, available: &[String]) -> Result<Portfolio, PortfolioError> {
        let t = Portfolio::load(p)?;
        t.check_algorithms(|a| available.iter().any(|x| x == a))
            .map_err(|what| PortfolioError::Invalid {
                path: p.display().to_string(),
                what,
            })?;
        Ok(t)
    }

    /// The table in force (None: no table).
    pub fn table(&self) -> Option<Arc<Portfolio>> {
        self.table.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// No table: every `ccp_auto` flow runs the default algorithm.
    pub fn none(default_w: Preference) -> Self {
        Self {
            table: RwLock::new(None),
            path: None,
            default_w,
            for_default: false,
            available: Vec::new(),
        }
    }

    /// Read the table again (SIGHUP): a bad or missing new file keeps the old table.
    pub fn reload(&self) -> Result<bool, PortfolioError> {
        let Some(p) = &self.path else {
            return Ok(false);
        };
        if !present(p)? {
            return Ok(false);
        }
        let t = Arc::new(Self::load_for(p, &self.available)?);
        *self.table.write().unwrap_or_else(|e| e.into_inner()) = Some(t);
        Ok(true)
    }

    /// The choice for a flow with preference `w` (its own, else the agent's default) among
    /// the `available` algorithms; None without a table or a runnable entry.
    pub fn choose(&self, w: Option<Preference>, available: &[String]) -> Option<Choice> {
        self.choose_in(w, None, available)
    }

    /// [`AutoSelect::choose`] for a flow of path class `class` (None: the default class).
    pub fn choose_in(
        &self,
        w: Option<Preference>,
        class: Option<&str>,
        available: &[String],
    ) -> Option<Choice> {
        let t = self.table()?;
        t.choose(&w.unwrap_or(self.default_w), class, |a| {
            available.iter().any(|x| x == a)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = r#"{
        "version": 1, "default_class": "all",
        "classes": {
            "all": [
                {"alg": "bbr", "w": null, "o": [0.95, 0.55, 0.97]},
                {"alg": "cubic", "w": null, "o": [0.85, 0.50, 0.99]},
                {"alg": "mocc", "w": [0.8, 0.1, 0.1], "o": [0.90, 0.70, 0.99]},
                {"alg": "mocc", "w": [0.1, 0.8, 0.1], "o": [0.40, 0.97, 1.0]}
            ],
            "cellular": [{"alg": "cubic", "w": null, "o": [0.5, 0.5, 1.0]}]
        }
    }"#;

    fn w(a: f64, b: f64, c: f64) -> Preference {
        Preference::new(a, b, c).unwrap()
    }

    #[test]
    fn picks_the_best_operating_point_for_each_preference() {
        let p = Portfolio::parse(TABLE, "t").unwrap();
        let all = |_: &str| true;
        // throughput-heavy: bbr 0.95*0.8+0.055+0.097 = 0.912 vs mocc@thr 0.72+0.07+0.099 = 0.889
        let c = p.choose(&w(0.8, 0.1, 0.1), None, all).unwrap();
        assert_eq!(c.alg, "bbr");
        assert_eq!(c.runner_up.as_ref().map(|r| r.0.as_str()), Some("mocc"));
        // latency-heavy: mocc's latency landmark (0.04+0.776+0.1 = 0.916) is the one scored
        let c = p.choose(&w(0.1, 0.8, 0.1), None, all).unwrap();
        assert_eq!(c.alg, "mocc");
        assert_eq!(c.landmark, Some(w(0.1, 0.8, 0.1)));
        assert!((c.score - 0.916).abs() < 1e-9, "{}", c.score);
        // an algorithm this agent does not run is skipped
        let c = p.choose(&w(0.1, 0.8, 0.1), None, |a| a != "mocc").unwrap();
        assert_eq!(c.alg, "bbr");
        // a named class; an unknown one is the default
        assert_eq!(
            p.choose(&w(0.1, 0.8, 0.1), Some("cellular"), all)
                .unwrap()
                .alg,
            "cubic"
        );
        assert_eq!(
            p.choose(&w(0.8, 0.1, 0.1), Some("nope"), all).unwrap().alg,
            "bbr"
        );
        // nothing runnable: the caller's fallback
        assert!(p.choose(&w(0.8, 0.1, 0.1), None, |_| false).is_none());
    }

    #[test]
    fn equal_scores_go_to_the_first_name() {
        let t = r#"{"version":1,"default_class":"a","classes":{"a":[
            {"alg":"zeta","w":null,"o":[0.5,0.5,0.5]},{"alg":"alpha","w":null,"o":[0.5,0.5,0.5]}]}}"#;
        let p = Portfolio::parse(t, "t").unwrap();
        assert_eq!(
            p.choose(&w(0.4, 0.5, 0.1), None, |_| true).unwrap().alg,
            "alpha"
        );
    }

    #[test]
    fn bad_tables_are_refused_with_the_reason() {
        let cases = [
            ("{", "not a portfolio table"),
            (
                r#"{"version":2,"default_class":"a","classes":{"a":[{"alg":"x","w":null,"o":[0,0,0]}]}}"#,
                "version 2",
            ),
            (
                r#"{"version":1,"default_class":"b","classes":{"a":[{"alg":"x","w":null,"o":[0,0,0]}]}}"#,
                "default_class \"b\"",
            ),
            (
                r#"{"version":1,"default_class":"a","classes":{"a":[]}}"#,
                "has 0 entries",
            ),
            (
                r#"{"version":1,"default_class":"a","classes":{"a":[{"alg":"x","w":null,"o":[0,1.5,0]}]}}"#,
                "objective 1 is 1.5",
            ),
            (
                r#"{"version":1,"default_class":"a","classes":{"a":[{"alg":"x","w":[0.5,0.5,0.5],"o":[0,0,0]}]}}"#,
                "sum to",
            ),
            (
                r#"{"version":1,"default_class":"a","classes":{"a":[{"alg":"","w":null,"o":[0,0,0]}]}}"#,
                "1 to 64 bytes",
            ),
            (
                r#"{"version":1,"default_class":"a","classes":{"a":[{"alg":"x","w":null,"o":[0,0]}]}}"#,
                "not a portfolio table",
            ),
        ];
        for (text, want) in cases {
            let e = Portfolio::parse(text, "t.json").unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert!(e.contains("t.json"), "{e}");
        }
    }

    #[test]
    fn a_reload_the_agent_cannot_serve_keeps_the_old_table() {
        // issue 43: a table naming an algorithm this agent lacks, or a class its classifier
        // never gives, is refused at start-up, and on SIGHUP the old table stays
        let dir = empty_dir("reload");
        let path = dir.join(FILE);
        std::fs::write(&path, TABLE).unwrap();
        let runs: Vec<String> = ["bbr", "cubic", "mocc"].map(String::from).to_vec();
        let auto =
            AutoSelect::open(Some(path.clone()), w(0.4, 0.5, 0.1), false, runs.clone()).unwrap();
        let before = auto.table().unwrap();
        for (bad, want) in [
            (
                TABLE.replace("\"cubic\"", "\"owl\""),
                "\"owl\", which this agent does not run",
            ),
            (
                TABLE.replace(
                    "\"classes\"",
                    "\"classifier\": {\"bin_ms\": 200, \"window_s\": 6, \"min_s\": 10, \
                     \"hold_s\": 3, \"features\": [\"rate_iqr\", \"rtt_iqr\", \"inflation\", \
                     \"loss\", \"busy_rate_iqr\", \"busy_frac\"], \"weights\": [1,0,0,0,0,0], \
                     \"bias\": -1, \"above\": \"cellular\", \"below\": \"links\"}, \"classes\"",
                ),
                "class \"links\", which the table does not have",
            ),
        ] {
            std::fs::write(&path, &bad).unwrap();
            let e = auto.reload().unwrap_err().to_string();
            assert!(e.contains(FILE) && e.contains(want), "{e}");
            assert_eq!(*auto.table().unwrap(), *before, "the old table stays");
            let e = AutoSelect::open(Some(path.clone()), w(0.4, 0.5, 0.1), false, runs.clone())
                .unwrap_err()
                .to_string();
            assert!(e.contains(FILE), "{e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn non_finite_objectives_are_not_json() {
        // JSON has no NaN; serde refuses the token, so a NaN can never reach a score
        let t = r#"{"version":1,"default_class":"a","classes":{"a":[{"alg":"x","w":null,"o":[NaN,0,0]}]}}"#;
        assert!(Portfolio::parse(t, "t").is_err());
    }

    /// A new empty folder under the temporary directory, for this test process.
    fn empty_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ccp-portfolio-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// `f` on a thread, its result if it ends within 5 s (a hang is a failure, not a
    /// stuck test run).
    fn within_5s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(5)).ok()
    }

    #[test]
    fn fifos_and_symlink_loops_as_the_table_are_refused_at_once() {
        // issue 42 item 4: a FIFO hung start-up (and the signal loop on SIGHUP); item 8: a
        // symlink loop was "no table"
        let dir = empty_dir("fifo");
        let fifo = dir.join(FILE);
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        let f2 = fifo.clone();
        let e = within_5s(move || Portfolio::load(&f2).map(|_| ()))
            .expect("reading a FIFO table hung")
            .unwrap_err();
        assert!(e.to_string().contains("not a regular file (a FIFO)"), "{e}");
        assert!(e.to_string().contains(FILE), "{e}");
        let f3 = fifo.clone();
        let e = within_5s(move || {
            AutoSelect::open(Some(f3), w(0.4, 0.5, 0.1), false, vec![]).map(|_| ())
        })
        .expect("opening a FIFO table hung")
        .unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        std::fs::remove_file(&fifo).unwrap();
        let other = dir.join("other.json");
        std::os::unix::fs::symlink(&other, &fifo).unwrap();
        std::os::unix::fs::symlink(&fifo, &other).unwrap();
        let e = AutoSelect::open(Some(fifo.clone()), w(0.4, 0.5, 0.1), false, vec![]).unwrap_err();
        assert!(e.to_string().contains(FILE), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
