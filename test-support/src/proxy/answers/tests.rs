//! Requests and answers encoded and decoded as a client and a broker would.

use kafka_protocol::messages::{
    ApiVersionsResponse, ListOffsetsRequest, MetadataResponse, api_versions_response,
    list_offsets_request, metadata_response,
};
use kafka_protocol::protocol::encode_request_header_into_buffer;

use super::*;

fn frame(api: ApiKey, version: i16, body: &RequestKind) -> Bytes {
    let mut header = RequestHeader::default();
    header.request_api_key = api as i16;
    header.request_api_version = version;
    header.correlation_id = 42;
    header.client_id = Some(StrBytes::from_static_str("app-1-consumer"));
    let mut out = BytesMut::new();
    encode_request_header_into_buffer(&mut out, &header).expect("header");
    body.encode(&mut out, version)
        .unwrap_or_else(|err| panic!("{api:?} v{version}: {err}"));
    out.freeze()
}

#[test]
fn a_list_offsets_request_is_answered_with_the_error_in_each_partition() {
    let mut partition = list_offsets_request::ListOffsetsPartition::default();
    partition.partition_index = 3;
    let mut topic = list_offsets_request::ListOffsetsTopic::default();
    topic.name = StrBytes::from_static_str("app-counts-changelog").into();
    topic.partitions.push(partition);
    let mut request = ListOffsetsRequest::default();
    request.topics.push(topic);
    for version in [1, 7, 10] {
        let parsed = Request::parse(&frame(
            ApiKey::ListOffsets,
            version,
            &RequestKind::ListOffsets(request.clone()),
        ))
        .expect("a request");
        assert_eq!(
            (parsed.api, parsed.correlation_id),
            (ApiKey::ListOffsets, 42)
        );
        assert_eq!(parsed.client_id, "app-1-consumer");
        let mut answer = parsed.error_answer(6).expect("an answer");
        let header = ResponseHeader::decode(
            &mut answer,
            ApiKey::ListOffsets.response_header_version(version),
        )
        .expect("header");
        assert_eq!(header.correlation_id, 42);
        let body = kafka_protocol::messages::ListOffsetsResponse::decode(&mut answer, version)
            .expect("body");
        let p = &body.topics[0].partitions[0];
        assert_eq!((p.partition_index, p.error_code), (3, 6), "v{version}");
    }
}

fn answer(api: ApiKey, version: i16, body: &ResponseKind) -> Bytes {
    encode(api, version, 7, body).expect("an answer")
}

fn decoded(api: ApiKey, version: i16, mut frame: Bytes) -> ResponseKind {
    let header =
        ResponseHeader::decode(&mut frame, api.response_header_version(version)).expect("header");
    assert_eq!(header.correlation_id, 7);
    ResponseKind::decode(api, &mut frame, version).expect("body")
}

#[test]
fn metadata_answers_name_the_proxy_and_carry_the_armed_error() {
    let mut broker = metadata_response::MetadataResponseBroker::default();
    broker.node_id = 2.into();
    broker.host = StrBytes::from_static_str("10.0.0.2");
    broker.port = 9092;
    let mut topic = metadata_response::MetadataResponseTopic::default();
    topic.name = Some(StrBytes::from_static_str("t").into());
    let mut body = MetadataResponse::default();
    body.brokers.push(broker);
    body.topics.push(topic);
    for version in [1, 9, 12] {
        let rewrite = Rewrite {
            api: ApiKey::Metadata,
            version,
            metadata_error: Some(5),
        };
        let frame = answer(
            ApiKey::Metadata,
            version,
            &ResponseKind::Metadata(body.clone()),
        );
        let mut asked = Vec::new();
        let rewritten = rewrite.apply(frame, &mut |host, port| {
            asked.push((host.to_owned(), port));
            40_000
        });
        assert_eq!(asked, [("10.0.0.2".to_owned(), 9092)]);
        let ResponseKind::Metadata(out) = decoded(ApiKey::Metadata, version, rewritten) else {
            panic!("a metadata answer");
        };
        assert_eq!(
            (out.brokers[0].host.as_str(), out.brokers[0].port),
            ("127.0.0.1", 40_000)
        );
        assert_eq!(out.topics[0].error_code, 5, "v{version}");
    }
}

#[test]
fn api_versions_offer_only_what_kafka_protocol_reads() {
    let offered = |api_key: i16, min: i16, max: i16| {
        let mut v = api_versions_response::ApiVersion::default();
        v.api_key = api_key;
        v.min_version = min;
        v.max_version = max;
        v
    };
    let mut body = ApiVersionsResponse::default();
    body.api_keys
        .push(offered(ApiKey::Metadata as i16, 0, i16::MAX));
    body.api_keys.push(offered(9_999, 0, 3));
    let rewrite = Rewrite {
        api: ApiKey::ApiVersions,
        version: 3,
        metadata_error: None,
    };
    let frame = answer(ApiKey::ApiVersions, 3, &ResponseKind::ApiVersions(body));
    let rewritten = rewrite.apply(frame, &mut |_, port| port);
    let ResponseKind::ApiVersions(out) = decoded(ApiKey::ApiVersions, 3, rewritten) else {
        panic!("an ApiVersions answer");
    };
    assert_eq!(
        out.api_keys.len(),
        1,
        "an API kafka-protocol does not know is dropped"
    );
    assert_eq!(
        out.api_keys[0].max_version,
        ApiKey::Metadata.valid_versions().max
    );
}

/// Every error code the answer carries, wherever it sits.
fn error_codes(answer: &ResponseKind) -> Vec<i16> {
    match answer {
        ResponseKind::Produce(a) => a
            .responses
            .iter()
            .flat_map(|t| t.partition_responses.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::Fetch(a) => a
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::OffsetCommit(a) => a
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::OffsetFetch(a) => std::iter::once(a.error_code)
            .chain(a.groups.iter().map(|g| g.error_code))
            .chain(
                a.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
            )
            .collect(),
        ResponseKind::FindCoordinator(a) => std::iter::once(a.error_code)
            .chain(a.coordinators.iter().map(|c| c.error_code))
            .collect(),
        ResponseKind::JoinGroup(a) => vec![a.error_code],
        ResponseKind::SyncGroup(a) => vec![a.error_code],
        ResponseKind::Heartbeat(a) => vec![a.error_code],
        ResponseKind::LeaveGroup(a) => vec![a.error_code],
        ResponseKind::InitProducerId(a) => vec![a.error_code],
        ResponseKind::AddPartitionsToTxn(a) => std::iter::once(a.error_code)
            .chain(
                a.results_by_topic_v3_and_below
                    .iter()
                    .chain(
                        a.results_by_transaction
                            .iter()
                            .flat_map(|t| &t.topic_results),
                    )
                    .flat_map(|t| {
                        t.results_by_partition
                            .iter()
                            .map(|p| p.partition_error_code)
                    }),
            )
            .collect(),
        ResponseKind::AddOffsetsToTxn(a) => vec![a.error_code],
        ResponseKind::TxnOffsetCommit(a) => a
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::EndTxn(a) => vec![a.error_code],
        _ => Vec::new(),
    }
}

#[test]
fn each_api_the_proxy_answers_carries_the_error_at_each_version() {
    use kafka_protocol::messages::{
        AddOffsetsToTxnRequest, EndTxnRequest, FetchRequest, FindCoordinatorRequest,
        HeartbeatRequest, InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest,
        OffsetCommitRequest, OffsetFetchRequest, ProduceRequest, SyncGroupRequest, fetch_request,
        offset_commit_request, offset_fetch_request, produce_request,
    };
    let topic = || StrBytes::from_static_str("t");
    let mut produce = ProduceRequest::default();
    let mut data = produce_request::TopicProduceData::default();
    data.name = topic().into();
    data.partition_data
        .push(produce_request::PartitionProduceData::default());
    produce.topic_data.push(data);
    let mut fetch = FetchRequest::default();
    let mut fetched = fetch_request::FetchTopic::default();
    fetched.topic = topic().into();
    fetched
        .partitions
        .push(fetch_request::FetchPartition::default());
    fetch.topics.push(fetched);
    let mut commit = OffsetCommitRequest::default();
    let mut committed = offset_commit_request::OffsetCommitRequestTopic::default();
    committed.name = topic().into();
    committed
        .partitions
        .push(offset_commit_request::OffsetCommitRequestPartition::default());
    commit.topics.push(committed);
    let mut offsets = OffsetFetchRequest::default();
    let mut asked = offset_fetch_request::OffsetFetchRequestTopic::default();
    asked.name = topic().into();
    asked.partition_indexes.push(0);
    offsets.topics = Some(vec![asked]);
    let mut grouped = OffsetFetchRequest::default();
    grouped
        .groups
        .push(offset_fetch_request::OffsetFetchRequestGroup::default());
    let mut one_key = FindCoordinatorRequest::default();
    one_key.key = StrBytes::from_static_str("g");
    // The transaction coordinator's key (key type 1), as a transactional producer asks.
    let mut txn_key = one_key.clone();
    txn_key.key_type = 1;
    let mut keys = FindCoordinatorRequest::default();
    keys.coordinator_keys.push(StrBytes::from_static_str("g"));
    let cases: Vec<(ApiKey, RequestKind, &[i16])> = vec![
        (ApiKey::Produce, RequestKind::Produce(produce), &[3, 9, 12]),
        (ApiKey::Fetch, RequestKind::Fetch(fetch), &[4, 12]),
        (
            ApiKey::OffsetCommit,
            RequestKind::OffsetCommit(commit),
            &[2, 8],
        ),
        (
            ApiKey::OffsetFetch,
            RequestKind::OffsetFetch(offsets),
            &[1, 7],
        ),
        (
            ApiKey::OffsetFetch,
            RequestKind::OffsetFetch(grouped),
            &[8, 9],
        ),
        (
            ApiKey::FindCoordinator,
            RequestKind::FindCoordinator(one_key),
            &[1, 3],
        ),
        (
            ApiKey::FindCoordinator,
            RequestKind::FindCoordinator(txn_key),
            &[1, 2],
        ),
        (
            ApiKey::FindCoordinator,
            RequestKind::FindCoordinator(keys),
            &[4, 6],
        ),
        (
            ApiKey::JoinGroup,
            RequestKind::JoinGroup(JoinGroupRequest::default()),
            &[2, 9],
        ),
        (
            ApiKey::SyncGroup,
            RequestKind::SyncGroup(SyncGroupRequest::default()),
            &[1, 5],
        ),
        (
            ApiKey::Heartbeat,
            RequestKind::Heartbeat(HeartbeatRequest::default()),
            &[1, 4],
        ),
        (
            ApiKey::LeaveGroup,
            RequestKind::LeaveGroup(LeaveGroupRequest::default()),
            &[1, 4],
        ),
        (
            ApiKey::InitProducerId,
            RequestKind::InitProducerId(InitProducerIdRequest::default()),
            &[1, 4],
        ),
        (
            ApiKey::AddPartitionsToTxn,
            RequestKind::AddPartitionsToTxn(add_partitions_request(false)),
            &[0, 3],
        ),
        (
            ApiKey::AddPartitionsToTxn,
            RequestKind::AddPartitionsToTxn(add_partitions_request(true)),
            &[4, 5],
        ),
        (
            ApiKey::AddOffsetsToTxn,
            RequestKind::AddOffsetsToTxn(AddOffsetsToTxnRequest::default()),
            &[0, 3, 4],
        ),
        (
            ApiKey::TxnOffsetCommit,
            RequestKind::TxnOffsetCommit(txn_offset_commit_request()),
            &[0, 3, 5],
        ),
        (
            ApiKey::EndTxn,
            RequestKind::EndTxn(EndTxnRequest::default()),
            &[0, 3, 5],
        ),
    ];
    for (api, request, versions) in cases {
        for &version in versions {
            let parsed = Request::parse(&frame(api, version, &request))
                .unwrap_or_else(|| panic!("{api:?} v{version} parsed"));
            let frame = parsed
                .error_answer(15)
                .unwrap_or_else(|| panic!("{api:?} v{version} answered"));
            let codes = error_codes(&decoded_as(api, version, frame));
            assert!(codes.contains(&15), "{api:?} v{version}: {codes:?}");
        }
    }
}

fn decoded_as(api: ApiKey, version: i16, mut frame: Bytes) -> ResponseKind {
    let header =
        ResponseHeader::decode(&mut frame, api.response_header_version(version)).expect("header");
    assert_eq!(header.correlation_id, 42);
    ResponseKind::decode(api, &mut frame, version).expect("body")
}

/// An AddPartitionsToTxn request for partitions 1 and 4 of topic `t`: a client's (one
/// transaction, versions 0 to 3) or a broker's batched one (`batched`, versions 4 and later).
fn add_partitions_request(batched: bool) -> kafka_protocol::messages::AddPartitionsToTxnRequest {
    use kafka_protocol::messages::add_partitions_to_txn_request;
    let mut topic = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
    topic.name = StrBytes::from_static_str("t").into();
    topic.partitions = vec![1, 4];
    let mut request = kafka_protocol::messages::AddPartitionsToTxnRequest::default();
    if batched {
        let mut transaction =
            add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default();
        transaction.transactional_id = StrBytes::from_static_str("app-1-0").into();
        transaction.topics.push(topic);
        request.transactions.push(transaction);
    } else {
        request.v3_and_below_transactional_id = StrBytes::from_static_str("app-1-0").into();
        request.v3_and_below_topics.push(topic);
    }
    request
}

/// A TxnOffsetCommit request for partition 2 of topic `t`.
fn txn_offset_commit_request() -> kafka_protocol::messages::TxnOffsetCommitRequest {
    use kafka_protocol::messages::txn_offset_commit_request;
    let mut partition = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default();
    partition.partition_index = 2;
    partition.committed_offset = 10;
    let mut topic = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
    topic.name = StrBytes::from_static_str("t").into();
    topic.partitions.push(partition);
    let mut request = kafka_protocol::messages::TxnOffsetCommitRequest::default();
    request.topics.push(topic);
    request
}

/// librdkafka ignores an AddPartitionsToTxn error for a partition the answer does not name,
/// so each partition asked for is named, with the error, at each version.
#[test]
fn an_add_partitions_to_txn_answer_names_each_partition_asked_for() {
    for (batched, versions) in [(false, [0, 3]), (true, [4, 5])] {
        let request = RequestKind::AddPartitionsToTxn(add_partitions_request(batched));
        for version in versions {
            let parsed = Request::parse(&frame(ApiKey::AddPartitionsToTxn, version, &request))
                .expect("a request");
            let answer = parsed.error_answer(51).expect("an answer");
            let ResponseKind::AddPartitionsToTxn(body) =
                decoded_as(ApiKey::AddPartitionsToTxn, version, answer)
            else {
                panic!("an AddPartitionsToTxn answer");
            };
            let topics = if batched {
                assert_eq!(body.error_code, 51, "v{version}");
                assert_eq!(
                    body.results_by_transaction[0].transactional_id.as_str(),
                    "app-1-0"
                );
                &body.results_by_transaction[0].topic_results
            } else {
                &body.results_by_topic_v3_and_below
            };
            assert_eq!(topics[0].name.as_str(), "t", "v{version}");
            let partitions: Vec<(i32, i16)> = topics[0]
                .results_by_partition
                .iter()
                .map(|p| (p.partition_index, p.partition_error_code))
                .collect();
            assert_eq!(partitions, [(1, 51), (4, 51)], "v{version}");
        }
    }
}

/// The group coordinator's answer to a transaction's offsets names each partition.
#[test]
fn a_txn_offset_commit_answer_names_each_partition() {
    let request = RequestKind::TxnOffsetCommit(txn_offset_commit_request());
    for version in [0, 2, 3, 5] {
        let parsed =
            Request::parse(&frame(ApiKey::TxnOffsetCommit, version, &request)).expect("a request");
        let answer = parsed.error_answer(51).expect("an answer");
        let ResponseKind::TxnOffsetCommit(body) =
            decoded_as(ApiKey::TxnOffsetCommit, version, answer)
        else {
            panic!("a TxnOffsetCommit answer");
        };
        let p = &body.topics[0].partitions[0];
        assert_eq!(body.topics[0].name.as_str(), "t");
        assert_eq!((p.partition_index, p.error_code), (2, 51), "v{version}");
    }
}
