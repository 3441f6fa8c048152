//! The fault proxy against the real broker, with a plain librdkafka client: answers name only
//! the proxy's ports, and each kind of fault does what it says.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use statestore_test_support::proxy::{ApiKey, Fault, ResponseError};
use statestore_test_support::{Cluster, FaultProxy};

fn consumer(bootstrap: &str, client_id: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("client.id", client_id)
        .set("socket.timeout.ms", "3000")
        .create()
        .expect("a consumer")
}

/// The brokers the metadata of every topic names.
fn metadata(consumer: &BaseConsumer) -> Result<Vec<(i32, String, i32)>, KafkaError> {
    let metadata = consumer.fetch_metadata(None, Duration::from_secs(10))?;
    Ok(metadata
        .brokers()
        .iter()
        .map(|b| (b.id(), b.host().to_owned(), b.port()))
        .collect())
}

#[test]
fn answers_name_the_proxy_and_faults_do_what_they_say() {
    let Some(broker) = statestore_test_support::kafka_bootstrap(
        "answers_name_the_proxy_and_faults_do_what_they_say",
    ) else {
        return;
    };
    let proxy = FaultProxy::start(&broker).expect("the proxy");
    let through = consumer(proxy.bootstrap(), "probe-a");

    // Every broker the metadata names is one of the proxy's ports.
    let brokers = metadata(&through).expect("metadata through the proxy");
    assert!(!brokers.is_empty());
    for (id, host, port) in &brokers {
        assert_eq!(host, "127.0.0.1", "broker {id}");
        assert!(
            !broker.ends_with(&format!(":{port}")),
            "broker {id} named at its own port {port}"
        );
    }
    assert!(proxy.requests(ApiKey::Metadata) > 0);

    // A delayed answer arrives late.
    let delayed = proxy
        .inject(Fault::delay(ApiKey::Metadata, Duration::from_millis(1_500)))
        .expect("a fault");
    let started = Instant::now();
    metadata(&through).expect("a delayed answer");
    assert!(delayed.wait(Duration::ZERO));
    assert!(started.elapsed() >= Duration::from_millis(1_500));

    // A client the fault is not aimed at is not touched; the one it is aimed at gets the
    // error in each answer.
    let refused = proxy
        .inject(
            Fault::error(ApiKey::Metadata, ResponseError::TopicAuthorizationFailed)
                .times(1_000)
                .client("-b"),
        )
        .expect("a fault");
    metadata(&through).expect("probe-a is not aimed at");
    assert_eq!(refused.fired(), 0);
    let other = consumer(proxy.bootstrap(), "probe-b");
    // A topic named in the request is in the answer, whether the broker knows it or not.
    let answer = other
        .fetch_metadata(Some("proxy-probe"), Duration::from_secs(10))
        .expect("metadata with topic errors");
    assert!(!answer.topics().is_empty());
    assert!(refused.fired() > 0);
    let authorization_failed = |t: &rdkafka::metadata::MetadataTopic| {
        t.error().map(RDKafkaErrorCode::from) == Some(RDKafkaErrorCode::TopicAuthorizationFailed)
    };
    assert!(
        answer.topics().iter().all(authorization_failed),
        "every topic carries the error"
    );
    proxy.clear();

    // A dropped answer closes the connection: the client connects again (its ApiVersions
    // request comes again) and gets its answer then.
    let connections = proxy.requests(ApiKey::ApiVersions);
    let dropped = proxy
        .inject(Fault::drop_connection(ApiKey::Metadata).client("probe-a"))
        .expect("a fault");
    metadata(&through).expect("answers after a reconnection");
    assert!(dropped.wait(Duration::ZERO));
    assert!(proxy.requests(ApiKey::ApiVersions) > connections);

    // A blackholed client gets no answer until the blackhole lifts.
    proxy.blackhole("probe-a");
    assert!(
        through
            .fetch_metadata(None, Duration::from_secs(2))
            .is_err()
    );
    proxy.lift();
    metadata(&through).expect("answers once the blackhole lifted");

    // A fault the proxy cannot answer with an error is refused when armed.
    let refused = proxy.inject(Fault::error(
        ApiKey::CreateTopics,
        ResponseError::NotController,
    ));
    assert!(refused.is_err());
}

#[test]
fn each_broker_of_a_cluster_gets_a_port_of_its_own() {
    if statestore_test_support::kafka_bootstrap("each_broker_of_a_cluster_gets_a_port_of_its_own")
        .is_none()
    {
        return;
    }
    let cluster = Cluster::start(3);
    // Bootstrapped through one node only: the others are learnt from the metadata.
    let first = format!("127.0.0.1:{}", cluster.port(1));
    let proxy = FaultProxy::start(&first).expect("the proxy");
    let through = consumer(proxy.bootstrap(), "probe-cluster");
    let brokers = metadata(&through).expect("metadata through the proxy");
    assert_eq!(brokers.len(), 3, "{brokers:?}");
    let own: Vec<i32> = (1..=3).map(|n| i32::from(cluster.port(n))).collect();
    let ports: BTreeSet<i32> = brokers.iter().map(|(_, _, port)| *port).collect();
    assert_eq!(ports.len(), 3, "{brokers:?}");
    assert!(ports.iter().all(|port| !own.contains(port)), "{brokers:?}");
    // ListGroups goes to every broker: each answers through its own port of the proxy.
    let before = proxy.requests(ApiKey::ListGroups);
    through
        .fetch_group_list(None, Duration::from_secs(20))
        .expect("every broker answers through the proxy");
    assert!(proxy.requests(ApiKey::ListGroups) >= before + 3);
}
