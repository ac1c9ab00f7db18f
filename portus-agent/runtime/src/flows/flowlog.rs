//! `--flow-log FILE`: one JSON object per line for each flow event, so tests and operators can
//! see which algorithm drives which socket and what it decided.
//!
//! ```text
//! {"event":"create","t":0.012,"sid":3,"requested":"ccp_reno","alg":"reno","w":[0.4,0.5,0.1],"w_source":"default","src":"10.0.1.1:40000","dst":"10.0.2.2:5201","cwnd_bytes":14480,"rate_bps":null}
//! {"event":"report","t":0.112,"sid":3,"alg":"reno","cwnd_bytes":28960,"rate_bps":null,"reports":4,"srtt_us":40210.5,...}
//! {"event":"pref","t":3.2,"sid":3,"alg":"reno","w":[0.1,0.8,0.1],"w_source":"socket","reports":160}
//! {"event":"close","t":20.5,"sid":3,"alg":"reno","reports":1830,...}
//! ```
//! Report lines are written at most every `report_every` per flow (wall clock) to keep the
//! file small at high report rates; create and close lines always. The file is opened
//! without blocking (a FIFO without a reader is an error, not a hang) and a line that
//! cannot be written at once is dropped: a slow reader must not stop congestion control.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use ccp_algs::Action;
use serde_json::json;

use crate::flows::FlowRecord;

/// JSON text with U+0085, U+2028 and U+2029 written as `\u` escapes. JSON allows them raw
/// inside strings (serde_json escapes only U+0000..U+001F), but they end a line for many
/// line-splitting readers (Python's `str.splitlines`, JavaScript), so a flow's name could
/// split one JSON line into several. They can only occur inside strings of serialized JSON,
/// so replacing them keeps the same value.
pub fn escape_line_separators(json: String) -> String {
    const SEPARATORS: [char; 3] = ['\u{85}', '\u{2028}', '\u{2029}'];
    if !json.contains(SEPARATORS) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if SEPARATORS.contains(&c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

pub struct FlowLog {
    out: BufWriter<File>,
    start: Instant,
    report_every: Duration,
    last_report: HashMap<u32, Instant>,
}

/// Flows whose last report time is kept before old entries are pruned.
const MAX_TRACKED: usize = 2 * crate::flows::MAX_FLOWS;

impl FlowLog {
    /// Create (truncate) `path` for writing, without blocking.
    pub fn open(path: &Path, report_every: Duration) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)?;
        Ok(Self {
            out: BufWriter::new(f),
            start: Instant::now(),
            report_every,
            last_report: HashMap::new(),
        })
    }

    fn write(&mut self, v: serde_json::Value) {
        let Ok(text) = serde_json::to_string(&v) else {
            return;
        };
        let mut line = escape_line_separators(text);
        line.push('\n');
        // a full disk must not stop congestion control: drop the line
        let _ = self.out.write_all(line.as_bytes());
        let _ = self.out.flush();
    }

    fn t(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub fn create(&mut self, r: &FlowRecord, a: &Action) {
        let (src, dst) = match &r.addr {
            Some(x) if x.is_v6() => (
                format!("[v6]:{}", x.src_port),
                format!("[v6]:{}", x.dst_port),
            ),
            Some(x) => (
                format!("{}:{}", x.src_ip, x.src_port),
                format!("{}:{}", x.dst_ip, x.dst_port),
            ),
            None => (String::new(), String::new()),
        };
        let mut v = json!({"event": "create", "t": self.t(), "sid": r.sid, "requested": r.requested,
            "alg": r.alg, "w": r.w.as_array(), "w_source": r.w_source.to_string(),
            "src": src, "dst": dst, "cwnd_bytes": a.cwnd_bytes, "rate_bps": a.rate_bps});
        if let Some(c) = &r.choice {
            // why the portfolio chose this algorithm: its score w·o, the landmark it was
            // measured at, and the best other algorithm
            v["choice"] = json!({"score": c.score,
                "landmark": c.landmark.map(|w| w.as_array()),
                "runner_up": c.runner_up.as_ref().map(|(a, s)| json!({"alg": a, "score": s}))});
        }
        self.write(v);
    }

    /// The flow's preference changed (it takes effect at this decision).
    pub fn preference(&mut self, r: &FlowRecord) {
        let v = json!({"event": "pref", "t": self.t(), "sid": r.sid, "alg": r.alg,
            "w": r.w.as_array(), "w_source": r.w_source.to_string(), "reports": r.metrics.reports});
        self.write(v);
    }

    pub fn report(&mut self, r: &FlowRecord, a: &Action) {
        let now = Instant::now();
        if let Some(last) = self.last_report.get(&r.sid) {
            if now.duration_since(*last) < self.report_every {
                return;
            }
        }
        if self.last_report.len() >= MAX_TRACKED {
            // entries older than `report_every` decide nothing: forget them
            let every = self.report_every;
            self.last_report
                .retain(|_, t| now.duration_since(*t) < every);
        }
        self.last_report.insert(r.sid, now);
        let m = &r.metrics;
        let v = json!({"event": "report", "t": self.t(), "sid": r.sid, "alg": r.alg,
            "cwnd_bytes": a.cwnd_bytes, "rate_bps": a.rate_bps, "interval_us": a.report_interval_us,
            "reports": m.reports, "srtt_us": m.srtt_us, "min_rtt_us": m.min_rtt_us,
            "loss_events": m.loss_events, "clamped_outputs": m.clamped_outputs});
        self.write(v);
    }

    /// A `ccp_auto` flow's path class was decided or changed; `switch` if its algorithm
    /// changed with it.
    pub fn class(&mut self, r: &FlowRecord, switch: Option<&crate::flows::Switch>) {
        let mut v = json!({"event": if switch.is_some() { "switch" } else { "class" },
            "t": self.t(), "sid": r.sid, "alg": r.alg, "w": r.w.as_array(),
            "reports": r.metrics.reports});
        if let Some(c) = &r.class {
            v["class"] = json!(c.class);
            v["features"] = json!(c.features);
            v["score"] = json!(c.score);
            v["flow_s"] = json!(c.at_s);
        }
        if let Some(s) = switch {
            v["from"] = json!(s.from);
            v["choice_score"] = json!(s.score);
            v["cwnd_bytes"] = json!(s.cwnd_bytes);
            v["delivery_rate_bps"] = json!(s.delivery_rate_bps);
        }
        self.write(v);
    }

    pub fn close(&mut self, r: &FlowRecord) {
        self.last_report.remove(&r.sid);
        let v = json!({"event": "close", "t": self.t(), "sid": r.sid, "alg": r.alg,
            "reports": r.metrics.reports, "loss_events": r.metrics.loss_events});
        self.write(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flows::prefs::PrefSource;

    #[test]
    fn unicode_line_separators_in_names_are_escaped() {
        // issue 42 item 8: U+2028, U+2029 and U+0085 are valid unescaped in JSON but end a
        // line for many line-splitting readers (Python's str.splitlines, JavaScript)
        let dir = std::env::temp_dir().join(format!("ccp-flowlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("flows.jsonl");
        let mut log = FlowLog::open(&path, Duration::ZERO).unwrap();
        let name = "ccp_x\u{2028}a\u{2029}b\u{85}c\u{1c}d";
        let r = FlowRecord {
            sid: 7,
            requested: name.into(),
            alg: "reno",
            w: ccp_algs::Preference::default(),
            w_source: PrefSource::Rule {
                index: 0,
                name: Some("rule\u{2028}one".into()),
            },
            addr: None,
            choice: None,
            class: None,
            switches: Vec::new(),
            closed: false,
            metrics: Default::default(),
        };
        let a = Action::default();
        log.create(&r, &a);
        log.report(&r, &a);
        log.close(&r);
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let terminators = [
            '\n', '\r', '\u{b}', '\u{c}', '\u{1c}', '\u{1d}', '\u{1e}', '\u{85}', '\u{2028}',
            '\u{2029}',
        ];
        let lines: Vec<&str> = text.split(&terminators[..]).collect();
        // three events and the empty tail after the last '\n'
        assert_eq!(lines.len(), 4, "{text:?}");
        assert_eq!(lines[3], "");
        let create: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(create["requested"], name);
        assert_eq!(create["event"], "create");
        assert!(lines[0].contains(r"\u2028") && lines[0].contains(r"\u0085"));
    }
}
