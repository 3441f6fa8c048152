//! The example's instance processes behind the fault proxy, as issue 38 met them: while input
//! flows and one instance is killed and restarted, NOT_LEADER_OR_FOLLOWER answers to
//! ListOffsets (the watermarks of restores and standby catch-ups) and retriable errors of
//! Produce, OffsetCommit and Heartbeat stop neither instance, and both stores end exact.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use statestore_test_support::FaultProxy;
use statestore_test_support::proxy::{ApiKey, Fault, ResponseError};
use support::instances::*;
use support::{BIN, unique};

const SESSION_MS: u64 = 6_000;

#[test]
fn retriable_errors_while_an_instance_is_killed_and_restarted_stop_no_instance() {
    let Some(broker) = statestore_test_support::kafka_bootstrap(
        "retriable_errors_while_an_instance_is_killed_and_restarted_stop_no_instance",
    ) else {
        return;
    };
    let proxy = FaultProxy::start(&broker).expect("the proxy");
    let (app, topic) = (unique("pwc-proxy"), unique("pwc-proxy-words"));
    create_topics(&broker, &topic, &app, 1);
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("dir")).collect();
    let names = (topic.as_str(), app.as_str());
    let feeder = Feeder::start(&broker, &topic);
    let start = |name, dir: &std::path::Path| {
        Instance::start(
            name,
            Command::new(BIN),
            proxy.bootstrap(),
            names,
            dir,
            SESSION_MS,
        )
    };
    let mut a = start("a", dirs[0].path());
    let mut b = start("b", dirs[1].path());
    a.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    b.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));

    let faults = [
        Fault::error(ApiKey::ListOffsets, ResponseError::NotLeaderOrFollower).times(5),
        Fault::error(ApiKey::Produce, ResponseError::NotLeaderOrFollower).times(5),
        Fault::error(ApiKey::Produce, ResponseError::RequestTimedOut).times(3),
        Fault::error(ApiKey::OffsetCommit, ResponseError::CoordinatorNotAvailable).times(3),
        Fault::error(ApiKey::OffsetCommit, ResponseError::NotCoordinator).times(2),
        Fault::error(ApiKey::Heartbeat, ResponseError::CoordinatorNotAvailable).times(2),
    ];
    let armed: Vec<_> = faults
        .into_iter()
        .map(|fault| proxy.inject(fault).expect("a fault"))
        .collect();
    // B dies without committing and comes back on its state: A restores B's tasks from
    // its standby copies or the changelogs, then hands them back, each restore through the
    // ListOffsets errors left.
    drop(b);
    watch(Duration::from_secs(2), &mut [&mut a]);
    let mut b = start("b", dirs[1].path());
    b.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !armed.iter().all(|fault| fault.wait(Duration::ZERO)) && Instant::now() < deadline {
        watch(Duration::from_millis(500), &mut [&mut a, &mut b]);
    }
    let fired: Vec<u64> = armed.iter().map(|fault| fault.fired()).collect();
    assert_eq!(fired, [5, 5, 3, 3, 2, 2], "faults fired");

    let lines = feeder.stop();
    wait_complete(
        &broker,
        names,
        Duration::from_secs(120),
        &mut [&mut a, &mut b],
    );
    a.stop();
    b.stop();
    assert_exact(&broker, &app, lines);
}
