mod common;
use ccp_sim::Scenario;
use common::*;

#[test]
fn one_cubic_flow_fills_the_link() {
    let sc = Scenario::from_file(scenarios_dir().join("one-flow.toml")).unwrap();
    let (r, log) = run_with(&sc, "cubic", None);
    println!("{}", serde_json::to_string_pretty(&r).unwrap());
    println!("{log:?}");
    assert!(r.utilization >= 0.9, "utilization {}", r.utilization);
}
