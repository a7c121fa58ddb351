//! A cluster of real `keel` processes on loopback, one shard each, for replication
//! tests: node ids 1..=n, each with its own Kafka, admin and node-to-node ports.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use kafka_protocol::messages::alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::metadata_response::MetadataResponsePartition;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId, CreateTopicsRequest,
    MetadataRequest, MetadataResponse,
};

use bytes::Bytes;
use keel_protocol::batch::{build_batch, split_and_validate};

use super::kafka::{fetch, list_offset, name, records_of};
use super::{free_port, Broker, Conn};

pub struct Cluster {
    pub nodes: Vec<Broker>,
    /// Each node's node-to-node port (shard 0's), by node id - 1.
    pub rpc: Vec<u16>,
    /// `--peers` of every node: the metadata voters.
    peers: String,
    yaml: String,
}

impl Cluster {
    /// Starts `n` nodes and waits until every one lists all `n` brokers and a
    /// controller.
    pub fn start(n: usize) -> Cluster {
        Cluster::start_with_yaml(n, "")
    }

    /// As [`Cluster::start`], every node with `yaml` as its configuration file.
    pub fn start_with_yaml(n: usize, yaml: &str) -> Cluster {
        Cluster::start_with_node_args(n, yaml, |_| Vec::new())
    }

    /// As [`Cluster::start_with_yaml`], node `id` with `node_args(id)` as more flags.
    pub fn start_with_node_args(n: usize, yaml: &str, node_args: impl Fn(i32) -> Vec<String>) -> Cluster {
        let rpc: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let peers: Vec<String> = rpc.iter().enumerate().map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1)).collect();
        let peers = peers.join(",");
        let nodes = (0..n)
            .map(|i| {
                let node_id = (i + 1).to_string();
                let rpc_addr = format!("127.0.0.1:{}", rpc[i]);
                let more = node_args(i as i32 + 1);
                let mut args = vec!["--node-id", node_id.as_str(), "--rpc-addr", &rpc_addr, "--peers", &peers];
                args.extend(more.iter().map(String::as_str));
                Broker::start_with_yaml(1, "256M", &args, yaml)
            })
            .collect();
        let cluster = Cluster { nodes, rpc, peers, yaml: yaml.to_string() };
        cluster.wait_until("every node lists every broker and a controller", Duration::from_secs(60), |c| {
            (1..=n as i32).all(|id| c.metadata(id, None).is_some_and(|m| m.brokers.len() == n && m.controller_id.0 > 0))
        });
        cluster
    }

    /// Starts one more node, not among the peers: it joins the cluster as a broker
    /// that does not vote on metadata. Waits until every node lists it. Returns its id.
    pub fn join(&mut self) -> i32 {
        let id = self.nodes.len() as i32 + 1;
        let node_id = id.to_string();
        let rpc_port = free_port();
        self.rpc.push(rpc_port);
        let rpc_addr = format!("127.0.0.1:{rpc_port}");
        let args = ["--node-id", node_id.as_str(), "--rpc-addr", &rpc_addr, "--peers", &self.peers];
        self.nodes.push(Broker::start_with_yaml(1, "256M", &args, &self.yaml));
        let n = self.nodes.len();
        self.wait_until("every node lists the new broker", Duration::from_secs(60), |c| {
            (1..=n as i32).all(|i| c.metadata(i, None).is_some_and(|m| m.brokers.len() == n && m.controller_id.0 > 0))
        });
        id
    }

    pub fn node(&mut self, id: i32) -> &mut Broker {
        &mut self.nodes[(id - 1) as usize]
    }

    pub fn try_connect(&self, id: i32) -> Option<Conn> {
        let port = self.nodes[(id - 1) as usize].port;
        let stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(15))).ok()?;
        Some(Conn::from_stream(stream))
    }

    /// Metadata from node `id` (all topics, or `topics`), if it answers.
    pub fn metadata(&self, id: i32, topics: Option<&[&str]>) -> Option<MetadataResponse> {
        let mut c = self.try_connect(id)?;
        let topics = topics.map(|ts| {
            ts.iter()
                .map(|t| {
                    kafka_protocol::messages::metadata_request::MetadataRequestTopic::default().with_name(Some(name(t)))
                })
                .collect()
        });
        let req = MetadataRequest::default().with_topics(topics).with_allow_auto_topic_creation(false);
        c.try_call(ApiKey::Metadata, 12, &req)
    }

    /// The controller as node `id` sees it.
    pub fn controller(&self, id: i32) -> Option<i32> {
        self.metadata(id, None).map(|m| m.controller_id.0).filter(|c| *c > 0)
    }

    /// Creates `topic` through the controller, retrying while it moves.
    pub fn create_topic(&self, topic: &str, partitions: i32, replication_factor: i16) -> i16 {
        self.create_topic_with_configs(topic, partitions, replication_factor, &[])
    }

    /// As `create_topic`, with topic configs.
    pub fn create_topic_with_configs(
        &self,
        topic: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &[(&str, &str)],
    ) -> i16 {
        let configs = super::kafka::topic_configs(configs);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let live = (1..=self.nodes.len() as i32).find(|id| self.metadata(*id, None).is_some());
            let controller = live.and_then(|id| self.controller(id));
            if let Some(mut c) = controller.and_then(|id| self.try_connect(id)) {
                let req = CreateTopicsRequest::default()
                    .with_topics(vec![CreatableTopic::default()
                        .with_name(name(topic))
                        .with_num_partitions(partitions)
                        .with_replication_factor(replication_factor)
                        .with_configs(configs.clone())])
                    .with_timeout_ms(10_000);
                let r: Option<kafka_protocol::messages::CreateTopicsResponse> =
                    c.try_call(ApiKey::CreateTopics, 7, &req);
                if let Some(code) = r.map(|r| r.topics[0].error_code) {
                    if code != 41 || Instant::now() > deadline {
                        return code;
                    }
                }
            }
            assert!(Instant::now() < deadline, "no controller took the topic");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Asks node `via` to move the partition to `replicas` (`None` cancels the move);
    /// returns the partition's error code.
    pub fn reassign(&self, via: i32, topic: &str, partition: i32, replicas: Option<&[i32]>) -> i16 {
        let p = ReassignablePartition::default()
            .with_partition_index(partition)
            .with_replicas(replicas.map(|r| r.iter().map(|n| BrokerId(*n)).collect()));
        let req = AlterPartitionReassignmentsRequest::default()
            .with_timeout_ms(10_000)
            .with_allow_replication_factor_change(true)
            .with_topics(vec![ReassignableTopic::default().with_name(name(topic)).with_partitions(vec![p])]);
        let mut k = self.try_connect(via).expect("the node answers");
        let r: AlterPartitionReassignmentsResponse = k.call(ApiKey::AlterPartitionReassignments, 1, &req);
        assert_eq!(r.error_code, 0, "{r:?}");
        r.responses[0].partitions[0].error_code
    }

    /// `topic`-`partition` as node `asking` describes it in Metadata.
    pub fn partition_metadata(&self, asking: i32, topic: &str, partition: i32) -> Option<MetadataResponsePartition> {
        let m = self.metadata(asking, Some(&[topic]))?;
        m.topics.first()?.partitions.iter().find(|p| p.partition_index == partition).cloned()
    }

    /// The leader of `topic`-`partition` as node `asking` reports it.
    pub fn leader(&self, asking: i32, topic: &str, partition: i32) -> Option<(i32, i32)> {
        let p = self.partition_metadata(asking, topic, partition)?;
        (p.leader_id.0 > 0).then_some((p.leader_id.0, p.leader_epoch))
    }

    /// Hands the leadership of `topic`-0 to node `to` (asked there, again until it
    /// takes) and waits up to `timeout` until every node in `asking` names it.
    pub fn move_leader(&self, asking: &[i32], topic: &str, to: i32, timeout: Duration) {
        let path = format!("/v1/partitions/{topic}/0/leader?to={to}");
        self.wait_until(&format!("node {to} leads {topic}-0"), timeout, |c| {
            let _ = c.nodes[(to - 1) as usize].admin_request("POST", &path);
            asking.iter().all(|id| c.leader(*id, topic, 0).map(|(l, _)| l) == Some(to))
        });
    }

    /// Waits until every live node in `asking` agrees on a leader of the partition
    /// other than `not`, and that leader stays: a group's first leader hands over to
    /// the preferred replica when that one is up, which a slow host may delay.
    pub fn wait_for_leader(&self, asking: &[i32], topic: &str, partition: i32, not: Option<i32>) -> (i32, i32) {
        let mut found = None;
        self.wait_until(&format!("a leader for {topic}-{partition}"), Duration::from_secs(60), |c| {
            let seen: Vec<Option<(i32, i32)>> = asking.iter().map(|id| c.leader(*id, topic, partition)).collect();
            found = seen[0];
            let Some((leader, epoch)) = seen[0] else { return false };
            let p = c.partition_metadata(asking[0], topic, partition);
            let preferred = p.and_then(|p| p.replica_nodes.first().map(|n| n.0));
            let stays = epoch > 1 || preferred.is_none_or(|p| p == leader || !asking.contains(&p));
            stays && Some(leader) != not && seen.iter().all(|s| *s == seen[0])
        });
        found.expect("a leader")
    }

    /// Every node in `asking` lists all `replicas` of partition 0 of `topic`, every one
    /// of them in sync.
    pub fn all_in_sync(&self, asking: &[i32], topic: &str, replicas: usize) -> bool {
        asking.iter().all(|id| {
            self.metadata(*id, Some(&[topic])).is_some_and(|m| {
                let p = &m.topics[0].partitions[0];
                p.replica_nodes.len() == replicas && p.isr_nodes.len() == replicas
            })
        })
    }

    pub fn wait_until(&self, what: &str, timeout: Duration, mut done: impl FnMut(&Cluster) -> bool) {
        let deadline = Instant::now() + timeout;
        while !done(self) {
            assert!(Instant::now() < deadline, "timed out waiting until {what}; logs:\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let log = b.log();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                format!("--- node {} ---\n{}", i + 1, tail.into_iter().rev().collect::<Vec<_>>().join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Produces `values` one batch each with acks=all to the partition's leader, asking
/// `asking` nodes who leads; retries a value on a leader change. Returns the values
/// acknowledged, in order.
pub fn produce_all(c: &Cluster, asking: &[i32], topic: &str, partition: i32, values: &[String]) -> Vec<String> {
    let records: Vec<(Option<String>, String)> = values.iter().map(|v| (None, v.clone())).collect();
    produce_records(c, asking, topic, partition, &records)
}

/// As `produce_all`, each value with its key.
pub fn produce_records(
    c: &Cluster,
    asking: &[i32],
    topic: &str,
    partition: i32,
    records: &[(Option<String>, String)],
) -> Vec<String> {
    let mut acked = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut conn: Option<(i32, Conn)> = None;
    for (key, v) in records {
        loop {
            assert!(Instant::now() < deadline, "could not produce {v}; logs:\n{}", c.logs());
            if conn.is_none() {
                let (leader, _) = c.wait_for_leader(asking, topic, partition, None);
                conn = c.try_connect(leader).map(|k| (leader, k));
            }
            let Some((_, k)) = conn.as_mut() else { continue };
            let batch = build_batch(0, 0, &[(key.as_deref().map(str::as_bytes), Some(v.as_bytes()))]);
            let req = produce_request(topic, partition, batch);
            let r: Option<kafka_protocol::messages::ProduceResponse> =
                k.try_call(kafka_protocol::messages::ApiKey::Produce, 11, &req);
            match r.map(|r| r.responses[0].partition_responses[0].error_code) {
                Some(0) => {
                    acked.push(v.clone());
                    break;
                }
                _ => {
                    conn = None;
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
    acked
}

pub fn produce_request(topic: &str, partition: i32, batch: Bytes) -> kafka_protocol::messages::ProduceRequest {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let pd = PartitionProduceData::default().with_index(partition).with_records(Some(batch));
    kafka_protocol::messages::ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![TopicProduceData::default().with_name(name(topic)).with_partition_data(vec![pd])])
}

/// Every value of the partition from its log start, read from node `id` (its leader).
pub fn read_all(c: &Cluster, id: i32, topic: &str, partition: i32) -> Vec<String> {
    try_read_all(c, id, topic, partition).unwrap_or_else(|e| panic!("{e}"))
}

/// As [`read_all`], with an error instead of a panic: while leadership may still move
/// (the preferred replicas take it back a few seconds after a topic is made), a read
/// can meet NOT_LEADER_OR_FOLLOWER.
pub fn try_read_all(c: &Cluster, id: i32, topic: &str, partition: i32) -> Result<Vec<String>, String> {
    let mut k = c.try_connect(id).ok_or(format!("node {id} does not answer"))?;
    let mut out = Vec::new();
    let (error, mut offset) = list_offset(&mut k, topic, partition, -2);
    if error != 0 {
        return Err(format!("log start of {topic}-{partition} on node {id}: error {error}"));
    }
    loop {
        let r = fetch(&mut k, &[(topic, partition, offset)], 0, 1);
        let p = &r.responses[0].partitions[0];
        if p.error_code != 0 {
            return Err(format!("fetch {topic}-{partition} at {offset} from node {id}: error {}", p.error_code));
        }
        let records = p.records.clone().unwrap_or_default();
        let batches = split_and_validate(&records).unwrap();
        let Some((last, _)) = batches.last() else { break };
        out.extend(
            records_of(&records)
                .into_iter()
                .filter(|(o, _, _)| *o >= offset)
                .filter_map(|(_, _, v)| v)
                .map(|v| String::from_utf8(v.to_vec()).unwrap()),
        );
        offset = last.last_offset() + 1;
        if offset >= p.high_watermark {
            break;
        }
    }
    Ok(out)
}
