//! Per-decision cost of Iris: ns per `on_report` on a synthetic 20 Mbps / 50 ms stream,
//! refits (every 5 s of reports) included; Cubic on the same stream for scale.
//!
//! `cargo run --release -p ccp-algs --example iris_bench`

use std::hint::black_box;
use std::time::Instant;

use ccp_algs::iris::{Iris, IrisConfig};
use ccp_algs::{Algorithm, FlowInfo, Interval, Preference};

fn main() {
    let algs: Vec<(&str, Box<dyn Algorithm>)> = vec![
        ("iris-min", Box::new(Iris::default())),
        (
            "iris-mid",
            Box::new(Iris {
                config: IrisConfig {
                    target: ccp_algs::iris::IrisTarget::Median,
                    ..Default::default()
                },
            }),
        ),
        ("cubic", Box::new(ccp_algs::cubic::Cubic::default())),
    ];
    for (name, alg) in algs {
        let mut flow = alg.new_flow(&FlowInfo {
            sock_id: 1,
            mss: 1500,
            init_cwnd_bytes: 15_000,
            preference: Preference::default(),
        });
        flow.initial_action();
        let n = 1_000_000u64;
        let mut t = 0u64;
        let start = Instant::now();
        for i in 0..n {
            t += 50_000;
            // 83 packets per epoch with a queue that breathes between 50 and 58 ms of RTT
            let rtt =
                50_000.0 + 4_000.0 * (1.0 + ((i % 40) as f64 / 40.0 * std::f64::consts::TAU).sin());
            let iv = Interval {
                acked_bytes: 83 * 1500,
                acked_pkts: 83,
                misordered_pkts: (i % 7 == 0) as u64,
                lost_pkts: (i % 97 == 0) as u64,
                rtt_min_us: Some(rtt as u64 - 500),
                rtt_mean_us: Some(rtt),
                rtt_samples: 83,
                last_ack_us: Some(t),
                inflight_bytes: Some(100 * 1500),
                interval_us: 50_000,
                ..Default::default()
            };
            black_box(flow.on_report(black_box(&iv)));
        }
        let ns = start.elapsed().as_nanos() as f64 / n as f64;
        println!("{name}: {ns:.0} ns per on_report over {n} reports");
    }
}
