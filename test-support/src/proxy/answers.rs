//! Reading requests and writing or rewriting answers, all through `kafka-protocol`: the
//! proxy's only knowledge of Kafka's messages.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey,
    EndTxnResponse, FetchRequest, FetchResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    HeartbeatResponse, InitProducerIdResponse, JoinGroupResponse, LeaveGroupResponse,
    ListOffsetsRequest, ListOffsetsResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchRequest, OffsetFetchResponse, ProduceRequest, ProduceResponse, RequestHeader,
    RequestKind, ResponseHeader, ResponseKind, SyncGroupResponse, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse, add_partitions_to_txn_request, add_partitions_to_txn_response,
    fetch_response, find_coordinator_response, list_offsets_response, offset_commit_response,
    offset_fetch_response, produce_response, txn_offset_commit_response,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes, decode_request_header_from_buffer};

/// What the proxy needs of a request: its API, version, correlation id and client id, and
/// its body for an answer made up in its place.
#[derive(Debug)]
pub(super) struct Request {
    pub api: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    pub client_id: String,
    body: Bytes,
}

impl Request {
    /// The request in `frame` (a frame without its length), or `None` for one this
    /// `kafka-protocol` cannot read (an API newer than it), which is passed on untouched.
    pub(super) fn parse(frame: &Bytes) -> Option<Request> {
        let mut body = frame.clone();
        let header: RequestHeader = decode_request_header_from_buffer(&mut body).ok()?;
        let api = ApiKey::try_from(header.request_api_key).ok()?;
        Some(Request {
            api,
            version: header.request_api_version,
            correlation_id: header.correlation_id,
            client_id: header
                .client_id
                .map(|id| id.to_string())
                .unwrap_or_default(),
            body,
        })
    }

    /// Whether the broker answers it: all requests but a produce with `acks=0`.
    pub(super) fn expects_answer(&self) -> bool {
        if self.api != ApiKey::Produce {
            return true;
        }
        let mut body = self.body.clone();
        match RequestKind::decode(ApiKey::Produce, &mut body, self.version) {
            Ok(RequestKind::Produce(produce)) => produce.acks != 0,
            _ => true,
        }
    }

    /// An answer to this request with `code` in every error field, encoded with its header,
    /// or `None` for an API the proxy cannot answer itself (its request is then passed on).
    pub(super) fn error_answer(&self, code: i16) -> Option<Bytes> {
        let mut body = self.body.clone();
        let request = RequestKind::decode(self.api, &mut body, self.version).ok()?;
        let answer = error_body(request, code, self.version)?;
        encode(self.api, self.version, self.correlation_id, &answer)
    }
}

/// The answer `ResponseKind` to `request` with `code` in every error field.
fn error_body(request: RequestKind, code: i16, version: i16) -> Option<ResponseKind> {
    let answer = match request {
        RequestKind::Produce(request) => ResponseKind::Produce(produce_error(request, code)),
        RequestKind::Fetch(request) => ResponseKind::Fetch(fetch_error(request, code)),
        RequestKind::ListOffsets(request) => {
            ResponseKind::ListOffsets(list_offsets_error(request, code))
        }
        RequestKind::OffsetCommit(request) => {
            ResponseKind::OffsetCommit(offset_commit_error(request, code))
        }
        RequestKind::OffsetFetch(request) => {
            ResponseKind::OffsetFetch(offset_fetch_error(request, code, version))
        }
        RequestKind::FindCoordinator(request) => {
            ResponseKind::FindCoordinator(find_coordinator_error(request, code, version))
        }
        RequestKind::JoinGroup(request) => {
            let mut answer = JoinGroupResponse::default();
            answer.error_code = code;
            answer.generation_id = -1;
            answer.member_id = request.member_id;
            ResponseKind::JoinGroup(answer)
        }
        RequestKind::SyncGroup(_) => {
            let mut answer = SyncGroupResponse::default();
            answer.error_code = code;
            ResponseKind::SyncGroup(answer)
        }
        RequestKind::Heartbeat(_) => {
            let mut answer = HeartbeatResponse::default();
            answer.error_code = code;
            ResponseKind::Heartbeat(answer)
        }
        RequestKind::LeaveGroup(_) => {
            let mut answer = LeaveGroupResponse::default();
            answer.error_code = code;
            ResponseKind::LeaveGroup(answer)
        }
        RequestKind::InitProducerId(_) => {
            let mut answer = InitProducerIdResponse::default();
            answer.error_code = code;
            answer.producer_id = (-1).into();
            answer.producer_epoch = -1;
            ResponseKind::InitProducerId(answer)
        }
        RequestKind::AddPartitionsToTxn(request) => {
            ResponseKind::AddPartitionsToTxn(add_partitions_error(request, code, version))
        }
        RequestKind::AddOffsetsToTxn(_) => {
            let mut answer = AddOffsetsToTxnResponse::default();
            answer.error_code = code;
            ResponseKind::AddOffsetsToTxn(answer)
        }
        RequestKind::TxnOffsetCommit(request) => {
            ResponseKind::TxnOffsetCommit(txn_offset_commit_error(request, code))
        }
        RequestKind::EndTxn(_) => {
            let mut answer = EndTxnResponse::default();
            answer.error_code = code;
            // Versions 5 and later name the producer's id and epoch: none, as after a failure.
            answer.producer_id = (-1).into();
            answer.producer_epoch = -1;
            ResponseKind::EndTxn(answer)
        }
        _ => return None,
    };
    Some(answer)
}

fn produce_error(request: ProduceRequest, code: i16) -> ProduceResponse {
    let mut answer = ProduceResponse::default();
    for topic in request.topic_data {
        let mut out = produce_response::TopicProduceResponse::default();
        out.name = topic.name;
        out.topic_id = topic.topic_id;
        for partition in topic.partition_data {
            let mut p = produce_response::PartitionProduceResponse::default();
            p.index = partition.index;
            p.error_code = code;
            p.base_offset = -1;
            out.partition_responses.push(p);
        }
        answer.responses.push(out);
    }
    answer
}

fn fetch_error(request: FetchRequest, code: i16) -> FetchResponse {
    let mut answer = FetchResponse::default();
    for topic in request.topics {
        let mut out = fetch_response::FetchableTopicResponse::default();
        out.topic = topic.topic;
        out.topic_id = topic.topic_id;
        for partition in topic.partitions {
            let mut p = fetch_response::PartitionData::default();
            p.partition_index = partition.partition;
            p.error_code = code;
            p.high_watermark = -1;
            out.partitions.push(p);
        }
        answer.responses.push(out);
    }
    answer
}

fn list_offsets_error(request: ListOffsetsRequest, code: i16) -> ListOffsetsResponse {
    let mut answer = ListOffsetsResponse::default();
    for topic in request.topics {
        let mut out = list_offsets_response::ListOffsetsTopicResponse::default();
        out.name = topic.name;
        for partition in topic.partitions {
            let mut p = list_offsets_response::ListOffsetsPartitionResponse::default();
            p.partition_index = partition.partition_index;
            p.error_code = code;
            out.partitions.push(p);
        }
        answer.topics.push(out);
    }
    answer
}

fn offset_commit_error(request: OffsetCommitRequest, code: i16) -> OffsetCommitResponse {
    let mut answer = OffsetCommitResponse::default();
    for topic in request.topics {
        let mut out = offset_commit_response::OffsetCommitResponseTopic::default();
        out.name = topic.name;
        out.topic_id = topic.topic_id;
        for partition in topic.partitions {
            let mut p = offset_commit_response::OffsetCommitResponsePartition::default();
            p.partition_index = partition.partition_index;
            p.error_code = code;
            out.partitions.push(p);
        }
        answer.topics.push(out);
    }
    answer
}

/// An AddPartitionsToTxn answer with `code` for each partition asked for: in one list of
/// topics before version 4 (a client's request), per transaction from then on (a broker's
/// batched request), with the error at the top too. A client finds its partitions in the
/// answer, or it ignores the error.
fn add_partitions_error(
    request: AddPartitionsToTxnRequest,
    code: i16,
    version: i16,
) -> AddPartitionsToTxnResponse {
    let results = |topics: Vec<add_partitions_to_txn_request::AddPartitionsToTxnTopic>| {
        topics
            .into_iter()
            .map(|topic| {
                let mut out =
                    add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default();
                out.name = topic.name;
                for index in topic.partitions {
                    let mut p =
                        add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default(
                        );
                    p.partition_index = index;
                    p.partition_error_code = code;
                    out.results_by_partition.push(p);
                }
                out
            })
            .collect()
    };
    let mut answer = AddPartitionsToTxnResponse::default();
    if version < 4 {
        answer.results_by_topic_v3_and_below = results(request.v3_and_below_topics);
        return answer;
    }
    answer.error_code = code;
    for transaction in request.transactions {
        let mut out = add_partitions_to_txn_response::AddPartitionsToTxnResult::default();
        out.transactional_id = transaction.transactional_id;
        out.topic_results = results(transaction.topics);
        answer.results_by_transaction.push(out);
    }
    answer
}

/// A TxnOffsetCommit answer with `code` for each partition whose offset was to be committed.
fn txn_offset_commit_error(request: TxnOffsetCommitRequest, code: i16) -> TxnOffsetCommitResponse {
    let mut answer = TxnOffsetCommitResponse::default();
    for topic in request.topics {
        let mut out = txn_offset_commit_response::TxnOffsetCommitResponseTopic::default();
        out.name = topic.name;
        for partition in topic.partitions {
            let mut p = txn_offset_commit_response::TxnOffsetCommitResponsePartition::default();
            p.partition_index = partition.partition_index;
            p.error_code = code;
            out.partitions.push(p);
        }
        answer.topics.push(out);
    }
    answer
}

/// A FindCoordinator answer with `code`: for the one key asked before version 4, for each
/// key from then on.
fn find_coordinator_error(
    request: FindCoordinatorRequest,
    code: i16,
    version: i16,
) -> FindCoordinatorResponse {
    let mut answer = FindCoordinatorResponse::default();
    if version < 4 {
        answer.error_code = code;
        answer.node_id = (-1).into();
        answer.port = -1;
        return answer;
    }
    for key in request.coordinator_keys {
        let mut c = find_coordinator_response::Coordinator::default();
        c.key = key;
        c.error_code = code;
        c.node_id = (-1).into();
        c.port = -1;
        answer.coordinators.push(c);
    }
    answer
}

/// An OffsetFetch answer with `code`: per group from version 8, else for the whole request
/// (from version 2) and each partition asked for.
fn offset_fetch_error(request: OffsetFetchRequest, code: i16, version: i16) -> OffsetFetchResponse {
    let mut answer = OffsetFetchResponse::default();
    if version >= 8 {
        for group in request.groups {
            let mut out = offset_fetch_response::OffsetFetchResponseGroup::default();
            out.group_id = group.group_id;
            out.error_code = code;
            answer.groups.push(out);
        }
        return answer;
    }
    if version >= 2 {
        answer.error_code = code;
    }
    for topic in request.topics.unwrap_or_default() {
        let mut out = offset_fetch_response::OffsetFetchResponseTopic::default();
        out.name = topic.name;
        for index in topic.partition_indexes {
            let mut p = offset_fetch_response::OffsetFetchResponsePartition::default();
            p.partition_index = index;
            p.committed_offset = -1;
            p.error_code = code;
            out.partitions.push(p);
        }
        answer.topics.push(out);
    }
    answer
}

/// Header and body of an answer, encoded (without the frame's length).
fn encode(api: ApiKey, version: i16, correlation_id: i32, body: &ResponseKind) -> Option<Bytes> {
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    let mut out = BytesMut::new();
    header
        .encode(&mut out, api.response_header_version(version))
        .ok()?;
    body.encode(&mut out, version).ok()?;
    Some(out.freeze())
}

/// What an answer needs on its way to the client.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rewrite {
    pub api: ApiKey,
    pub version: i16,
    /// An error to set on every topic of a Metadata answer.
    pub metadata_error: Option<i16>,
}

impl Rewrite {
    /// Whether an answer of this kind is rewritten at all; others pass as they came.
    pub(super) fn needed(&self) -> bool {
        self.metadata_error.is_some()
            || matches!(
                self.api,
                ApiKey::Metadata
                    | ApiKey::FindCoordinator
                    | ApiKey::DescribeCluster
                    | ApiKey::ApiVersions
            )
            || (self.api == ApiKey::Produce && self.version >= 10)
            || (self.api == ApiKey::Fetch && self.version >= 16)
    }

    /// `frame` (an answer without its length) with every broker address replaced by the
    /// proxy's (`local` maps a broker's `host` and `port` to the proxy's port for it), the
    /// versions an ApiVersions answer offers narrowed to those `kafka-protocol` reads, and
    /// the Metadata error set. An answer it cannot read passes unchanged.
    pub(super) fn apply(&self, frame: Bytes, local: &mut dyn FnMut(&str, i32) -> i32) -> Bytes {
        if !self.needed() {
            return frame;
        }
        let mut buf = frame.clone();
        let header_version = self.api.response_header_version(self.version);
        let Ok(header) = ResponseHeader::decode(&mut buf, header_version) else {
            return frame;
        };
        let Ok(mut body) = ResponseKind::decode(self.api, &mut buf, self.version) else {
            return frame;
        };
        self.rewrite(&mut body, local);
        let mut out = BytesMut::new();
        if header.encode(&mut out, header_version).is_err()
            || body.encode(&mut out, self.version).is_err()
        {
            return frame;
        }
        out.freeze()
    }

    fn rewrite(&self, body: &mut ResponseKind, local: &mut dyn FnMut(&str, i32) -> i32) {
        let here = || StrBytes::from_static_str(super::LOOPBACK);
        match body {
            ResponseKind::Metadata(answer) => {
                for broker in &mut answer.brokers {
                    broker.port = local(&broker.host, broker.port);
                    broker.host = here();
                }
                if let Some(code) = self.metadata_error {
                    for topic in &mut answer.topics {
                        topic.error_code = code;
                    }
                }
            }
            ResponseKind::FindCoordinator(answer) => {
                if answer.port > 0 {
                    answer.port = local(&answer.host, answer.port);
                    answer.host = here();
                }
                for coordinator in &mut answer.coordinators {
                    if coordinator.port > 0 {
                        coordinator.port = local(&coordinator.host, coordinator.port);
                        coordinator.host = here();
                    }
                }
            }
            ResponseKind::DescribeCluster(answer) => {
                for broker in &mut answer.brokers {
                    broker.port = local(&broker.host, broker.port);
                    broker.host = here();
                }
            }
            ResponseKind::Produce(answer) => {
                for node in &mut answer.node_endpoints {
                    node.port = local(&node.host, node.port);
                    node.host = here();
                }
            }
            ResponseKind::Fetch(answer) => {
                for node in &mut answer.node_endpoints {
                    node.port = local(&node.host, node.port);
                    node.host = here();
                }
            }
            ResponseKind::ApiVersions(answer) => {
                answer.api_keys.retain_mut(|offered| {
                    let Ok(api) = ApiKey::try_from(offered.api_key) else {
                        return false;
                    };
                    let ours = api.valid_versions();
                    offered.min_version = offered.min_version.max(ours.min);
                    offered.max_version = offered.max_version.min(ours.max);
                    offered.min_version <= offered.max_version
                });
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
