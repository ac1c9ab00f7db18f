//! The network model, checked with a fixed-window / fixed-rate algorithm so that what is
//! measured is the link, the queue, the loss model and the sender, not a controller.

mod common;
use common::*;

const PKT: u32 = 1500;

fn fixed(cwnd_pkts: u32, rate_mbps: Option<f64>) -> Option<Fixed> {
    Some(Fixed {
        cwnd_bytes: cwnd_pkts * PKT,
        rate_bps: rate_mbps.map(|m| (m * 1e6 / 8.0) as u64),
    })
}

fn close(x: f64, want: f64, tol: f64) -> bool {
    (x - want).abs() <= tol
}

#[test]
fn constant_link_delivers_at_its_rate() {
    // 12 Mbit/s = 1 packet/ms; BDP 20 packets; window 100 packets fits in the 100-packet
    // buffer, so the link never idles and nothing is dropped
    let sc = scenario(
        "duration_s = 10\n[link]\nrate_mbps = 12\nbuffer_pkts = 100\n[[flow]]\nrtt_ms = 20\n",
    );
    let (r, _) = run_with(&sc, "fixed", fixed(100, None));
    let f = &r.flows[0];
    assert_eq!(f.drops_buffer + f.drops_random, 0);
    assert!(
        close(f.throughput_mbps, 12.0, 0.15),
        "{}",
        f.throughput_mbps
    );
    assert!(
        f.utilization > 0.985 && f.utilization <= 1.0,
        "{}",
        f.utilization
    );
    // standing queue of 100 - 20 = 80 packets = 80 ms
    assert!(
        close(f.queue_delay_p95_ms, 80.0, 2.0),
        "{}",
        f.queue_delay_p95_ms
    );
    assert!(close(f.rtt_p50_ms, 100.0, 2.0), "{}", f.rtt_p50_ms);
}

#[test]
fn drop_tail_caps_the_queue_at_the_buffer_size() {
    // window 200 packets >> BDP 20 + buffer 50: the queue sits at 50 packets (50 ms)
    let sc = scenario(
        "duration_s = 10\n[link]\nrate_mbps = 12\nbuffer_pkts = 50\n[[flow]]\nrtt_ms = 20\n",
    );
    let (r, _) = run_with(&sc, "fixed", fixed(200, None));
    let f = &r.flows[0];
    assert_eq!(r.buffer_pkts, 50);
    assert!(f.drops_buffer > 100, "{}", f.drops_buffer);
    assert_eq!(f.drops_random, 0);
    assert!(
        f.queue_delay_p95_ms <= 50.5 && f.queue_delay_p95_ms >= 45.0,
        "{}",
        f.queue_delay_p95_ms
    );
    // every drop is found by the sender and repaired (but those in the last window, still
    // undetected when the run ends); the link stays busy
    assert!(f.declared_lost + 200 >= f.drops_buffer, "{f:?}");
    assert!(f.declared_lost <= f.drops_buffer, "{f:?}");
    assert!(f.retransmits + 200 >= f.drops_buffer);
    assert!(f.utilization > 0.97, "{}", f.utilization);
}

#[test]
fn random_loss_matches_the_configured_probability() {
    // window 50 packets < BDP 83 packets: no queue, so every drop is a random one
    let sc = scenario(
        "duration_s = 20\nseed = 3\n[link]\nrate_mbps = 50\nbuffer_bdp = 1\nloss = 0.02\n\
         [[flow]]\nrtt_ms = 20\n",
    );
    let (r, _) = run_with(&sc, "fixed", fixed(50, None));
    let f = &r.flows[0];
    assert_eq!(f.drops_buffer, 0);
    assert!(f.packets_sent > 40_000, "{}", f.packets_sent);
    assert!(close(f.loss_rate, 0.02, 0.003), "{}", f.loss_rate);
    // losses are detected (3 later packets delivered), lost retransmissions included
    assert!(f.declared_lost + 60 >= f.drops_random, "{f:?}");
    assert!(f.declared_lost <= f.drops_random + 60, "{f:?}");
}

#[test]
fn unloaded_rtt_is_the_base_rtt() {
    // window 20 packets, BDP 167: no queue builds
    let sc =
        scenario("duration_s = 5\n[link]\nrate_mbps = 50\nbuffer_bdp = 1\n[[flow]]\nrtt_ms = 40\n");
    let (r, _) = run_with(&sc, "fixed", fixed(20, None));
    let f = &r.flows[0];
    // base RTT plus one transmission time (0.24 ms)
    assert!(
        f.rtt_p50_ms >= 40.0 && f.rtt_p50_ms <= 40.5,
        "{}",
        f.rtt_p50_ms
    );
    assert!(
        f.rtt_p95_ms >= 40.0 && f.rtt_p95_ms <= 40.5,
        "{}",
        f.rtt_p95_ms
    );
    // 20 packets per 40 ms
    assert!(close(f.throughput_mbps, 6.0, 0.2), "{}", f.throughput_mbps);
}

#[test]
fn pacing_spaces_packets() {
    let text = "duration_s = 10\n[link]\nrate_mbps = 50\nbuffer_bdp = 1\n[[flow]]\nrtt_ms = 40\n";
    // a 1000-packet window paced at 10 Mbit/s: one packet every 1.2 ms, never a queue
    let (paced, _) = run_with(&scenario(text), "fixed", fixed(1000, Some(10.0)));
    let f = &paced.flows[0];
    assert!(close(f.throughput_mbps, 10.0, 0.2), "{}", f.throughput_mbps);
    assert!(f.queue_delay_p95_ms < 0.3, "{}", f.queue_delay_p95_ms);
    assert_eq!(f.drops_buffer, 0);
    let late: Vec<_> = paced.series.iter().filter(|p| p.t > 1.0).collect();
    assert!(late.iter().all(|p| close(p.rate_mbps, 10.0, 0.01)));
    assert!(late.iter().all(|p| close(p.throughput_mbps, 10.0, 0.7)));
    // the same window unpaced is sent in bursts: a full buffer and drops
    let (burst, _) = run_with(&scenario(text), "fixed", fixed(1000, None));
    let g = &burst.flows[0];
    assert!(g.queue_delay_p95_ms > 20.0, "{}", g.queue_delay_p95_ms);
    assert!(g.drops_buffer > 0);
}

#[test]
fn trace_link_repeats_and_delivers_its_capacity() {
    // "1": one opportunity per ms = 12 Mbit/s, repeated every ms for 5 s
    let sc = scenario(
        "duration_s = 5\n[link]\ntrace = \"traces/twelve-mbps.trace\"\nbuffer_pkts = 100\n\
         [[flow]]\nrtt_ms = 20\n",
    );
    let (r, _) = run_with(&sc, "fixed", fixed(60, None));
    let f = &r.flows[0];
    assert!(close(f.throughput_mbps, 12.0, 0.2), "{}", f.throughput_mbps);
    assert!(f.utilization > 0.98, "{}", f.utilization);
    // trace_scale doubles it
    let sc2 = scenario(
        "duration_s = 5\n[link]\ntrace = \"traces/twelve-mbps.trace\"\ntrace_scale = 2.0\n\
         buffer_pkts = 200\n[[flow]]\nrtt_ms = 20\n",
    );
    let (r2, _) = run_with(&sc2, "fixed", fixed(120, None));
    assert!(close(r2.flows[0].throughput_mbps, 24.0, 0.4));
}

#[test]
fn cellular_trace_is_used_to_capacity_by_a_deep_window() {
    let sc = scenario(
        "duration_s = 30\n[link]\ntrace = \"traces/ATT-LTE-driving-2016.down\"\n\
         buffer_pkts = 1000\n[[flow]]\nrtt_ms = 40\n",
    );
    let (r, _) = run_with(&sc, "fixed", fixed(400, None));
    let f = &r.flows[0];
    assert!(f.utilization > 0.97, "{}", f.utilization);
    // the trace's first 30 s average about 4-5 Mbit/s
    assert!(f.throughput_mbps > 2.0 && f.throughput_mbps < 10.0);
}

#[test]
fn a_throughput_log_is_served_at_its_rates_outages_included() {
    // 12 Mbit/s for 2 s, an outage of 100 ms, 12 Mbit/s again (the last sample holds the
    // median interval, 2 s): 48 Mbit over the 4.1 s period, 11.71 Mbit/s; the window keeps
    // the queue busy and the outage is shorter than any retransmission timeout
    let dir = std::env::temp_dir().join(format!("ccp-sim-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("outage.tput"), "0 12\n2 0\n2.1 12\n").unwrap();
    let sc = ccp_sim::Scenario::from_toml_str(
        "duration_s = 8.2\n[link]\ntrace = \"outage.tput\"\nbuffer_pkts = 1000\n\
         [[flow]]\nrtt_ms = 20\n",
        &dir,
    )
    .unwrap();
    let (r, _) = run_with(&sc, "fixed", fixed(40, None));
    let f = &r.flows[0];
    assert_eq!((f.retransmits, f.timeouts), (0, 0), "{f:?}");
    assert!(f.utilization > 0.97, "{}", f.utilization);
    // in flight at the end: 40 packets (0.06 Mbit/s over 8.2 s) not delivered
    assert!(
        close(f.throughput_mbps, 11.71, 0.15),
        "{}",
        f.throughput_mbps
    );
    let after = r.throughput_window(2.5, 3.5)[0].1;
    assert!(close(after, 12.0, 0.3), "{after}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_5g_log_is_used_to_capacity_by_a_deep_window() {
    // a corpus recording named by its `.tput` suffix: 5G mmWave while driving, ~300 Mbit/s
    let sc = scenario(
        "duration_s = 10\n[link]\n\
         trace = \"traces/corpus/5gophers/03-User-Mobility/car-driving-trace-2.Sprint.tput\"\n\
         buffer_pkts = 20000\n[[flow]]\nrtt_ms = 20\n",
    );
    assert!(matches!(sc.link.capacity, ccp_sim::Capacity::Log { .. }));
    let (r, _) = run_with(&sc, "fixed", fixed(8000, None));
    let f = &r.flows[0];
    assert!(f.utilization > 0.97, "{}", f.utilization);
    // its first ten samples (1 s each) average 51.77 Mbit/s
    assert!(
        close(f.throughput_mbps, 51.77, 1.5),
        "{}",
        f.throughput_mbps
    );
}

#[test]
fn rate_schedule_steps_the_capacity() {
    let sc = scenario(
        "duration_s = 10\n[link]\nrate_mbps = 20\nrate_schedule = [{ at_s = 5, rate_mbps = 10 }]\n\
         buffer_pkts = 500\n[[flow]]\nrtt_ms = 20\n",
    );
    let (r, _) = run_with(&sc, "fixed", fixed(300, None));
    let before = r.throughput_window(1.0, 5.0)[0].1;
    let after = r.throughput_window(6.0, 10.0)[0].1;
    assert!(close(before, 20.0, 0.3), "{before}");
    assert!(close(after, 10.0, 0.3), "{after}");
    assert!(r.utilization > 0.97);
}

#[test]
fn timeouts_are_detected_and_reported_to_the_agent() {
    // 30% random loss: tails get lost, RTOs fire, and the invoke right after each RTO
    // carries was_timeout, which the Cubic program reports at once
    let sc = scenario(
        "duration_s = 20\nseed = 5\n[link]\nrate_mbps = 10\nbuffer_bdp = 1\nloss = 0.3\n\
         [[flow]]\nrtt_ms = 50\n",
    );
    let (r, log) = run_with(&sc, "cubic", None);
    let f = &r.flows[0];
    assert!(f.timeouts > 0, "{f:?}");
    assert!(log.timeout_reports >= 1, "{log:?}");
    assert!(log.timeout_reports <= f.timeouts);
    assert!(f.delivered_bytes > 0);
    assert!(f.retransmits > 0);
}
