//! Request builders for the tests.
#![allow(dead_code)]

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use keel_protocol::batch::split_and_validate;

use super::Conn;

pub fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

pub fn create_topic(c: &mut Conn, topic: &str, partitions: i32) -> CreateTopicsResponse {
    let req = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1)])
        .with_timeout_ms(10_000);
    c.call(ApiKey::CreateTopics, 7, &req)
}

pub fn produce(c: &mut Conn, acks: i16, parts: &[(&str, i32, Bytes)]) -> ProduceResponse {
    c.call(ApiKey::Produce, 11, &produce_request(acks, parts))
}

pub fn produce_request(acks: i16, parts: &[(&str, i32, Bytes)]) -> ProduceRequest {
    let mut topics: Vec<TopicProduceData> = Vec::new();
    for (t, p, records) in parts {
        let pd = PartitionProduceData::default().with_index(*p).with_records(Some(records.clone()));
        match topics.iter_mut().find(|x| x.name.0.as_str() == *t) {
            Some(x) => x.partition_data.push(pd),
            None => topics.push(TopicProduceData::default().with_name(name(t)).with_partition_data(vec![pd])),
        }
    }
    ProduceRequest::default().with_acks(acks).with_timeout_ms(10_000).with_topic_data(topics)
}

pub fn fetch(c: &mut Conn, parts: &[(&str, i32, i64)], max_wait_ms: i32, min_bytes: i32) -> FetchResponse {
    c.call(ApiKey::Fetch, 12, &fetch_request(parts, max_wait_ms, min_bytes))
}

pub fn fetch_request(parts: &[(&str, i32, i64)], max_wait_ms: i32, min_bytes: i32) -> FetchRequest {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for (t, p, offset) in parts {
        let fp =
            FetchPartition::default().with_partition(*p).with_fetch_offset(*offset).with_partition_max_bytes(1 << 20);
        match topics.iter_mut().find(|x| x.topic.0.as_str() == *t) {
            Some(x) => x.partitions.push(fp),
            None => topics.push(FetchTopic::default().with_topic(name(t)).with_partitions(vec![fp])),
        }
    }
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(min_bytes)
        .with_max_bytes(50 << 20)
        .with_session_epoch(-1)
        .with_topics(topics)
}

/// (key, value) of every record in a fetched `records` blob.
pub fn records_of(records: &Bytes) -> Vec<(i64, Option<Bytes>, Option<Bytes>)> {
    let mut buf = records.clone();
    let sets = kafka_protocol::records::RecordBatchDecoder::decode_all(&mut buf).unwrap();
    sets.into_iter().flat_map(|s| s.records).map(|r| (r.offset, r.key, r.value)).collect()
}

/// Topic configs of a CreateTopics request.
pub fn topic_configs(configs: &[(&str, &str)]) -> Vec<create_topics_request::CreatableTopicConfig> {
    configs
        .iter()
        .map(|(k, v)| {
            create_topics_request::CreatableTopicConfig::default()
                .with_name(StrBytes::from_string(k.to_string()))
                .with_value(Some(StrBytes::from_string(v.to_string())))
        })
        .collect()
}

pub fn create_topic_with_configs(
    c: &mut Conn,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> CreateTopicsResponse {
    let t = CreatableTopic::default()
        .with_name(name(topic))
        .with_num_partitions(partitions)
        .with_replication_factor(1)
        .with_configs(topic_configs(configs));
    c.call(ApiKey::CreateTopics, 7, &CreateTopicsRequest::default().with_topics(vec![t]).with_timeout_ms(10_000))
}

/// DeleteRecords for one partition: (error, low watermark).
pub fn delete_records(c: &mut Conn, topic: &str, partition: i32, offset: i64) -> (i16, i64) {
    use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
    let p = DeleteRecordsPartition::default().with_partition_index(partition).with_offset(offset);
    let req = DeleteRecordsRequest::default()
        .with_topics(vec![DeleteRecordsTopic::default().with_name(name(topic)).with_partitions(vec![p])])
        .with_timeout_ms(10_000);
    let r: DeleteRecordsResponse = c.call(ApiKey::DeleteRecords, 2, &req);
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.low_watermark)
}

/// ListOffsets for one partition (-2 earliest, -1 latest): (error, offset).
pub fn list_offset(c: &mut Conn, topic: &str, partition: i32, timestamp: i64) -> (i16, i64) {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let p = ListOffsetsPartition::default().with_partition_index(partition).with_timestamp(timestamp);
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default().with_name(name(topic)).with_partitions(vec![p])]);
    let r: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 7, &req);
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.offset)
}

/// An OffsetCommit outside group management (generation -1) of `offsets` (partition,
/// offset) of `topic`, each with metadata `meta-<offset>`.
pub fn offset_commit_request(group: &str, topic: &str, offsets: &[(i32, i64)]) -> OffsetCommitRequest {
    use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
    let parts = offsets
        .iter()
        .map(|(p, o)| {
            OffsetCommitRequestPartition::default()
                .with_partition_index(*p)
                .with_committed_offset(*o)
                .with_committed_metadata(Some(StrBytes::from_string(format!("meta-{o}"))))
        })
        .collect();
    OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default().with_name(name(topic)).with_partitions(parts)])
}

/// Every record value of a partition, read from offset 0 to its high watermark.
pub fn read_all(c: &mut Conn, topic: &str, partition: i32) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let r = fetch(c, &[(topic, partition, offset)], 0, 1);
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "fetch {topic}-{partition} at {offset}");
        let records = p.records.clone().unwrap_or_default();
        let batches = split_and_validate(&records).unwrap();
        let Some((last, _)) = batches.last() else { break };
        out.extend(records_of(&records).into_iter().filter(|(o, _, _)| *o >= offset).filter_map(|(_, _, v)| v));
        offset = last.last_offset() + 1;
        if offset >= p.high_watermark {
            break;
        }
    }
    out
}
