//! Sends a sequence to both brokers step by step and compares each pair of answers.
//!
//! Kafka gets each step first, then Keel, then the answers are compared before the next
//! step, so a divergence is pinned to the step that caused it. After a step that changes
//! topics (create, delete, add partitions, auto-create) the tester waits, on each broker,
//! until Metadata shows the change: Kafka applies metadata asynchronously after
//! answering, and a Produce racing that would compare timing, not behaviour. Likewise
//! after EndTxn (and InitProducerId, which may abort an open transaction) it waits
//! until DescribeTransactions shows the markers written: Kafka answers EndTxn once the
//! outcome is decided and writes the markers afterwards; after a topic config change it
//! pauses, as Kafka applies the change to what DescribeConfigs reads after answering;
//! after a client quota change it waits until DescribeClientQuotas shows it.
//! These waits are not compared and not counted as requests.
//!
//! A pipelined step is several requests written back to back on one connection before
//! any answer is read; their answers are read in order and compared one by one, and
//! the waits come after the last answer (see `run_sequence` for how Kafka gets one
//! whose changes it applies after answering).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ops::Range;
use std::thread;
use std::time::{Duration, Instant};

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeTransactionsRequest, FindCoordinatorRequest, InitProducerIdRequest, ListOffsetsRequest,
    ListTransactionsRequest, MetadataRequest, RequestKind, ResponseKind, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use serde_json::Value;

use crate::admin_steps::AdminRequest;
use crate::client::{Answer, Client, Pipelined};
use crate::diff::{diff, FieldDiff};
use crate::member_steps::{self, MemberRequest};
use crate::normalize::Normalizer;
use crate::project::project;
use crate::steps::{BrokerContext, Names, Request, Step};
use crate::txn_steps::{is_idempotent, TxnRequest};
use crate::versions::Versions;

/// Longest wait for a topic change to show in a broker's Metadata.
const SETTLE_WAIT_MS_MAX: u64 = 1_500;
const SETTLE_POLL_MS: u64 = 20;
/// Longest wait for a fresh broker's group and transaction coordinators.
const COORDINATOR_WAIT_MS_MAX: u64 = 60_000;

/// One broker under test and what the tester learned about it.
pub struct Broker {
    pub client: Client,
    pub node_id: i32,
    metadata_version: i16,
    list_offsets_version: i16,
    describe_transactions_version: Option<i16>,
    describe_client_quotas_version: Option<i16>,
}

/// The outcome of one step: both answers, normalised, and where they differ.
pub struct StepOutcome {
    pub kafka: Value,
    pub keel: Value,
    pub diffs: Vec<FieldDiff>,
}

impl Broker {
    pub fn new(mut client: Client, versions: &Versions) -> Result<Broker, String> {
        let metadata_version = versions.common(ApiKey::Metadata).ok_or("no common Metadata version")?.1;
        let request = RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![])));
        let answer = client.send(ApiKey::Metadata, metadata_version, &request, true);
        let description = format!("{answer:?}");
        let node_id = match answer.into_response() {
            Some(ResponseKind::Metadata(r)) => r.brokers.first().map(|b| b.node_id.0).unwrap_or(-1),
            _ => return Err(format!("Metadata failed: {description}")),
        };
        let list_offsets_version = versions.common(ApiKey::ListOffsets).ok_or("no common ListOffsets version")?.1;
        let describe_transactions_version = versions.common(ApiKey::DescribeTransactions).map(|(_, max)| max);
        let describe_client_quotas_version = versions.common(ApiKey::DescribeClientQuotas).map(|(_, max)| max);
        Ok(Broker {
            client,
            node_id,
            metadata_version,
            list_offsets_version,
            describe_transactions_version,
            describe_client_quotas_version,
        })
    }

    /// Waits until the broker can coordinate groups and transactions. A fresh Kafka
    /// creates its offsets topic (and its transaction state topic) on the first
    /// FindCoordinator for a group (for a transactional id) and answers
    /// COORDINATOR_NOT_AVAILABLE until then; it answers COORDINATOR_LOAD_IN_PROGRESS
    /// while it loads the new partitions (which ListTransactions reports) and, to
    /// InitProducerId, until its first block of producer ids has come from the
    /// controller. A start-up state, not behaviour worth comparing. Not counted as
    /// requests; the warm-up transactional id is never compared.
    pub fn wait_for_coordinator(&mut self, versions: &Versions) -> Result<(), String> {
        if let Some((_, version)) = versions.common(ApiKey::FindCoordinator) {
            for (key_type, kind) in [(0, "group coordinator"), (1, "transaction coordinator")] {
                let key = StrBytes::from_static_str("keel-diff-warm-up");
                let request = if version >= 4 {
                    FindCoordinatorRequest::default().with_coordinator_keys(vec![key])
                } else {
                    FindCoordinatorRequest::default().with_key(key)
                };
                let request = RequestKind::FindCoordinator(request.with_key_type(key_type));
                self.poll(kind, ApiKey::FindCoordinator, version, &request, |r| match r {
                    ResponseKind::FindCoordinator(r) => r.coordinators.first().map_or(r.error_code, |c| c.error_code),
                    _ => -1,
                })?;
            }
        }
        if let Some((_, version)) = versions.common(ApiKey::ListTransactions) {
            let request = RequestKind::ListTransactions(ListTransactionsRequest::default());
            self.poll("loaded transaction state", ApiKey::ListTransactions, version, &request, |r| match r {
                ResponseKind::ListTransactions(r) => r.error_code,
                _ => -1,
            })?;
        }
        if let Some((_, version)) = versions.common(ApiKey::InitProducerId) {
            let request = RequestKind::InitProducerId(
                InitProducerIdRequest::default()
                    .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("keel-diff-warm-up"))))
                    .with_transaction_timeout_ms(60_000),
            );
            self.poll("producer ids", ApiKey::InitProducerId, version, &request, |r| match r {
                ResponseKind::InitProducerId(r) => r.error_code,
                _ => -1,
            })?;
        }
        Ok(())
    }

    /// Sends `request` until `error_code` of the answer is 0, for at most
    /// `COORDINATOR_WAIT_MS_MAX`.
    fn poll(
        &mut self,
        what: &str,
        api: ApiKey,
        version: i16,
        request: &RequestKind,
        error_code: impl Fn(&ResponseKind) -> i16,
    ) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_millis(COORDINATOR_WAIT_MS_MAX);
        let mut last = String::new();
        while Instant::now() < deadline {
            let answer = self.client.send(api, version, request, true);
            last = format!("{answer:?}");
            if answer.into_response().is_some_and(|r| error_code(&r) == 0) {
                return Ok(());
            }
            thread::sleep(Duration::from_millis(200));
        }
        Err(format!("no {what} after 60 s; last answer: {last}"))
    }
}

/// Runs `steps` under `names` on both brokers and returns one outcome per step. A
/// pipelined step (a step and the pipelined steps after it) goes to Kafka whole, then
/// to Keel, and each of its answers is compared on its own.
///
/// Kafka gets a pipelined step one request at a time instead, with the usual waits
/// between them, when one of its requests takes effect on Kafka only after Kafka has
/// answered (`Request::applied_after_answer`): pipelined, the next request would see
/// the change or not depending on timing, so Kafka's answer would be no oracle. One
/// at a time, Kafka answers what a broker that applies each change before answering
/// must answer to the pipeline, and that is what Keel's answers are compared with.
pub fn run_sequence(kafka: &mut Broker, keel: &mut Broker, steps: &[Step], names: &Names) -> Vec<StepOutcome> {
    let mut sides = [Side::new(kafka.node_id), Side::new(keel.node_id)];
    let mut outcomes = Vec::with_capacity(steps.len());
    for group in pipelines(steps) {
        let group = &steps[group];
        let (kafka_answers, keel_answers) = match group {
            [step] => (vec![sides[0].send(kafka, step, names)], vec![sides[1].send(keel, step, names)]),
            _ if group.iter().any(|step| step.request.applied_after_answer()) => (
                group.iter().map(|step| sides[0].send(kafka, step, names)).collect(),
                sides[1].send_pipelined(keel, group, names),
            ),
            _ => (sides[0].send_pipelined(kafka, group, names), sides[1].send_pipelined(keel, group, names)),
        };
        for (kafka_answer, keel_answer) in kafka_answers.into_iter().zip(keel_answers) {
            let kafka_value = sides[0].normalizer.normalize(kafka_answer);
            let keel_value = sides[1].normalizer.normalize(keel_answer);
            let diffs = diff(&kafka_value, &keel_value);
            outcomes.push(StepOutcome { kafka: kafka_value, keel: keel_value, diffs });
        }
    }
    outcomes
}

/// Splits `steps` into the runs sent as one: a step with the pipelined steps right after
/// it. A member's step goes on the member's own connection, so it neither joins a run
/// nor takes the step after it into one; the first step starts a run whatever its mark
/// (a shrunk sequence may have dropped the step it followed).
fn pipelines(steps: &[Step]) -> Vec<Range<usize>> {
    let mut runs: Vec<Range<usize>> = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        let joins = step.pipelined
            && !matches!(step.request, Request::Member(_))
            && index > 0
            && !matches!(steps[index - 1].request, Request::Member(_));
        match runs.last_mut() {
            Some(run) if joins => run.end = index + 1,
            _ => runs.push(index..index + 1),
        }
    }
    runs
}

/// Per-broker state for one sequence: topic ids learned and topic id symbols, and the
/// connections of the group members the sequence plays.
struct Side {
    context: BrokerContext,
    normalizer: Normalizer,
    member_clients: HashMap<&'static str, Client>,
    /// Per member slot, its deferred request whose answer is still to be read: the API,
    /// the version and the group.
    pending: HashMap<&'static str, (ApiKey, i16, Option<&'static str>)>,
}

/// Pause after a deferred request, so that the broker has taken it before the next
/// step arrives on another connection.
const DEFERRED_PAUSE_MS: u64 = 100;

impl Side {
    fn new(node_id: i32) -> Side {
        Side {
            context: BrokerContext { node_id, ..Default::default() },
            normalizer: Normalizer::default(),
            member_clients: HashMap::new(),
            pending: HashMap::new(),
        }
    }

    /// Sends a member's step on the member's own connection; a deferred one only
    /// goes out, and `Collect` reads its answer.
    fn send_as_member(
        &mut self,
        broker: &mut Broker,
        request: &MemberRequest,
        version: i16,
        built: &RequestKind,
        names: &Names,
    ) -> Answer {
        let api = request.api_key();
        let Some(slot) = request.slot() else { return broker.client.send(api, version, built, true) };
        let client = match self.member_clients.entry(slot) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => match broker.client.another() {
                Ok(client) => entry.insert(client),
                Err(error) => return Answer::Transport(error),
            },
        };
        if let MemberRequest::Collect { .. } = request {
            let Some((api, version, group)) = self.pending.remove(slot) else { return Answer::NoResponse };
            let answer = client.receive(api, version);
            self.learn_slot(names, group, slot, &answer);
            return answer;
        }
        if let Some((api, version, _)) = self.pending.remove(slot) {
            // A deferred answer no step collected (a shrunk sequence left it out).
            let _ = client.receive(api, version);
        }
        if request.deferred() {
            return match client.send_only(api, version, built) {
                Ok(()) => {
                    self.pending.insert(slot, (api, version, request.group()));
                    thread::sleep(Duration::from_millis(DEFERRED_PAUSE_MS));
                    Answer::NoResponse
                }
                Err(error) => Answer::Transport(error),
            };
        }
        let answer = client.send(api, version, built, true);
        self.learn_slot(names, request.group(), slot, &answer);
        answer
    }

    fn learn_slot(&mut self, names: &Names, group: Option<&'static str>, slot: &'static str, answer: &Answer) {
        let (Some(group), Answer::Response(response)) = (group, answer) else { return };
        let state = self.context.slots.entry(member_steps::slot_key(names, group, slot)).or_default();
        member_steps::learn(state, response);
    }

    /// Sends one step and returns its raw projection.
    fn send(&mut self, broker: &mut Broker, step: &Step, names: &Names) -> Value {
        let request = step.request.build(step.version, names, &self.context);
        let api = step.request.api_key();
        let expect_response = step.request.expects_response();
        let started = Instant::now();
        let answer = match &step.request {
            Request::Member(member) => self.send_as_member(broker, member, step.version, &request, names),
            _ => broker.client.send(api, step.version, &request, expect_response),
        };
        trace(step, started, &answer);
        self.conclude(broker, step, answer, None, names)
    }

    /// Sends the steps of one pipelined step back to back on the broker's connection,
    /// reads their answers in order and returns their raw projections. Every request is
    /// built before any answer is read, from what the broker told earlier steps; the
    /// waits that follow a step (see `conclude`) come after the last answer.
    fn send_pipelined(&mut self, broker: &mut Broker, steps: &[Step], names: &Names) -> Vec<Value> {
        let built: Vec<RequestKind> =
            steps.iter().map(|step| step.request.build(step.version, names, &self.context)).collect();
        let requests: Vec<Pipelined> = steps
            .iter()
            .zip(&built)
            .map(|(step, request)| Pipelined {
                api_key: step.request.api_key(),
                version: step.version,
                request,
                expect_response: step.request.expects_response(),
            })
            .collect();
        let started = Instant::now();
        let answers = broker.client.pipeline(&requests);
        // Whether the connection outlived each request: the next request's answer
        // arrived. The last one is asked as after a step of its own.
        let survived: Vec<Option<bool>> = (0..answers.len())
            .map(|index| answers.get(index + 1).map(|next| !matches!(next, Answer::Transport(_))))
            .collect();
        steps
            .iter()
            .zip(answers)
            .zip(survived)
            .map(|((step, answer), survived)| {
                trace(step, started, &answer);
                self.conclude(broker, step, answer, survived, names)
            })
            .collect()
    }

    /// Projects one answer and waits for what it changed to settle before the next step.
    /// `survived` says whether the connection outlived an unanswered request, when a
    /// later request of its pipeline tells; otherwise the connection is checked here.
    fn conclude(
        &mut self,
        broker: &mut Broker,
        step: &Step,
        answer: Answer,
        survived: Option<bool>,
        names: &Names,
    ) -> Value {
        let expect_response = step.request.expects_response();
        let mut projected = project(&answer, &names.prefix);
        if let Request::Produce { acks: 0 | 1, .. } | Request::Txn(TxnRequest::Produce { acks: 0 | 1, .. }) =
            step.request
        {
            // A record acknowledged before it is durable (acks 0 or 1) is visible to
            // consumers on Kafka at once and on Keel once its flush pass has made it
            // durable (Keel's high watermark on a single node), about a millisecond
            // later. The pause keeps that timing, a design choice, out of the comparison.
            thread::sleep(Duration::from_millis(VISIBILITY_PAUSE_MS));
        }
        if let Request::AlterConfigs { validate_only: false, .. }
        | Request::IncrementalAlterConfigs { validate_only: false, .. } = step.request
        {
            // Kafka answers a config change once it is in the metadata log and applies it
            // to the configs DescribeConfigs reads shortly afterwards; a describe racing
            // that would compare timing, not behaviour.
            thread::sleep(Duration::from_millis(CONFIG_PAUSE_MS));
        }
        if !expect_response {
            // An unanswered request can only be judged by whether the connection survived.
            let open = survived.unwrap_or_else(|| broker.client.is_open());
            projected["connection_open"] = Value::Bool(open);
        }
        if let Answer::Response(response) = &answer {
            self.learn(response);
            self.learn_producer(&step.request, response, names);
            self.learn_member(&step.request, response, names);
            if let Request::Txn(request @ (TxnRequest::End { .. } | TxnRequest::InitProducerId { .. })) = &step.request
            {
                let txn = request.txn().expect("EndTxn and InitProducerId name their transactional id");
                if !is_idempotent(txn) {
                    settle_transaction(broker, &names.transactional_id(txn));
                }
            }
            settle_quotas(broker, &step.request, response, names);
            let started = Instant::now();
            for polled in settle(broker, &step.request, response, names) {
                self.learn(&polled);
            }
            if std::env::var_os("KEEL_DIFF_TRACE").is_some() {
                eprintln!("trace: settled in {} ms", started.elapsed().as_millis());
            }
        }
        projected
    }

    /// Remembers topic ids, which later steps need to address topics by id.
    fn learn(&mut self, response: &ResponseKind) {
        let ids = &mut self.context.topic_ids;
        match response {
            ResponseKind::CreateTopics(r) => {
                for t in r.topics.iter().filter(|t| t.error_code == 0 && !t.topic_id.is_nil()) {
                    ids.insert(t.name.0.to_string(), t.topic_id);
                }
            }
            ResponseKind::Metadata(r) => {
                for t in r.topics.iter().filter(|t| t.error_code == 0) {
                    let Some(name) = &t.name else { continue };
                    if !t.topic_id.is_nil() {
                        ids.insert(name.0.to_string(), t.topic_id);
                    }
                    for p in &t.partitions {
                        self.context.leader_epochs.insert((name.0.to_string(), p.partition_index), p.leader_epoch);
                    }
                }
            }
            ResponseKind::DescribeLogDirs(r) => {
                self.context.log_dirs = r.results.iter().map(|d| d.log_dir.to_string()).collect();
            }
            _ => {}
        }
    }
}

impl Side {
    /// Remembers the producer id and epoch a broker gave a transactional id
    /// (InitProducerId, and EndTxn from v5 on, which moves the epoch), which later steps
    /// send back.
    fn learn_producer(&mut self, request: &Request, response: &ResponseKind, names: &Names) {
        let (txn, id, epoch) = match (request, response) {
            (Request::Txn(TxnRequest::InitProducerId { txn }), ResponseKind::InitProducerId(r))
                if r.error_code == 0 =>
            {
                (txn, r.producer_id.0, r.producer_epoch)
            }
            (Request::Txn(TxnRequest::End { producer, .. }), ResponseKind::EndTxn(r)) if r.error_code == 0 => {
                (&producer.txn, r.producer_id.0, r.producer_epoch)
            }
            _ => return,
        };
        if id < 0 {
            return;
        }
        let seen = self.context.producers.entry(names.transactional_id(txn)).or_default();
        if seen.last() != Some(&(id, epoch)) {
            seen.push((id, epoch));
        }
    }
}

impl Side {
    /// Remembers the member id a broker gave the sequence's member of a group (also
    /// with MEMBER_ID_REQUIRED) and the generation it joined, which later steps send.
    fn learn_member(&mut self, request: &Request, response: &ResponseKind, names: &Names) {
        let (Request::Group(request), ResponseKind::JoinGroup(r)) = (request, response) else { return };
        let Some(group) = request.joins() else { return };
        let entry = self.context.members.entry(names.group(group)).or_default();
        if !r.member_id.is_empty() {
            entry.0 = r.member_id.to_string();
        }
        if r.error_code == 0 {
            entry.1 = r.generation_id;
        }
    }
}

/// With `KEEL_DIFF_TRACE` set, prints the answer decoded but not projected.
fn trace(step: &Step, started: Instant, answer: &Answer) {
    if std::env::var_os("KEEL_DIFF_TRACE").is_some() {
        let pipelined = if step.pipelined { " pipelined" } else { "" };
        let api = step.request.api_key();
        eprintln!("trace: {api:?} v{}{pipelined} {} ms {answer:?}", step.version, started.elapsed().as_millis());
    }
}

/// Waits (at most `SETTLE_WAIT_MS_MAX`) until the transaction of `transactional_id` is
/// not between its decision and its markers, so the next step sees the markers written.
fn settle_transaction(broker: &mut Broker, transactional_id: &str) {
    let Some(version) = broker.describe_transactions_version else { return };
    let request = RequestKind::DescribeTransactions(
        DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(StrBytes::from_string(transactional_id.to_string()))]),
    );
    let deadline = Instant::now() + Duration::from_millis(SETTLE_WAIT_MS_MAX);
    while Instant::now() < deadline {
        let settled = match broker.client.send(ApiKey::DescribeTransactions, version, &request, true).into_response() {
            Some(ResponseKind::DescribeTransactions(r)) => r.transaction_states.iter().all(|t| {
                !matches!(t.transaction_state.as_str(), "PrepareCommit" | "PrepareAbort" | "PrepareEpochFence")
            }),
            _ => false,
        };
        if settled {
            return;
        }
        thread::sleep(Duration::from_millis(SETTLE_POLL_MS));
    }
}

/// Waits (at most `SETTLE_WAIT_MS_MAX`) until DescribeClientQuotas shows the quotas an
/// accepted AlterClientQuotas set and removed: Kafka applies them after answering.
fn settle_quotas(broker: &mut Broker, request: &Request, response: &ResponseKind, names: &Names) {
    let (Request::Admin(AdminRequest::AlterClientQuotas { client, quotas }), ResponseKind::AlterClientQuotas(r)) =
        (request, response)
    else {
        return;
    };
    let Some(version) = broker.describe_client_quotas_version else { return };
    if r.entries.iter().any(|e| e.error_code != 0) {
        return;
    }
    let describe = AdminRequest::DescribeClientQuotas { client, strict: false };
    let describe = describe.build(version, names, &BrokerContext::default());
    let deadline = Instant::now() + Duration::from_millis(SETTLE_WAIT_MS_MAX);
    while Instant::now() < deadline {
        if let Some(ResponseKind::DescribeClientQuotas(r)) =
            broker.client.send(ApiKey::DescribeClientQuotas, version, &describe, true).into_response()
        {
            let shown: HashMap<String, f64> = r
                .entries
                .unwrap_or_default()
                .into_iter()
                .flat_map(|e| e.values)
                .map(|v| (v.key.to_string(), v.value))
                .collect();
            if quotas.iter().all(|(key, value)| shown.get(*key).copied() == *value) {
                return;
            }
        }
        thread::sleep(Duration::from_millis(SETTLE_POLL_MS));
    }
}

/// What a topic must look like in Metadata before the next step.
enum Expect {
    /// Exists with this many partitions, each with a leader.
    Ready(String, i32),
    Gone(String),
}

/// Waits until `broker`'s Metadata reflects the topic changes `response` reports, and
/// returns the last Metadata answers seen: they carry topic ids (the latest Metadata
/// version does) that later steps need even when the step's own version did not.
fn settle(broker: &mut Broker, request: &Request, response: &ResponseKind, names: &Names) -> Vec<ResponseKind> {
    let expectations: Vec<Expect> = match (request, response) {
        (Request::CreateTopics { validate_only: false, topics }, ResponseKind::CreateTopics(r)) => r
            .topics
            .iter()
            .filter(|t| t.error_code == 0)
            .map(|t| {
                let name = t.name.0.to_string();
                let requested = topics.iter().find(|n| names.topic(&n.topic) == name).map(|n| n.partitions);
                let partitions = if t.num_partitions > 0 { t.num_partitions } else { requested.unwrap_or(1).max(1) };
                Expect::Ready(name, partitions)
            })
            .collect(),
        (Request::DeleteTopics { .. }, ResponseKind::DeleteTopics(r)) => r
            .responses
            .iter()
            .filter(|t| t.error_code == 0)
            .filter_map(|t| t.name.as_ref().map(|n| Expect::Gone(n.0.to_string())))
            .collect(),
        (Request::CreatePartitions { validate_only: false, count, .. }, ResponseKind::CreatePartitions(r)) => r
            .results
            .iter()
            .filter(|t| t.error_code == 0)
            .map(|t| Expect::Ready(t.name.0.to_string(), *count))
            .collect(),
        (Request::Metadata { allow_auto_topic_creation: true, .. }, ResponseKind::Metadata(r)) => r
            .topics
            .iter()
            // Kafka creates the topic after answering UNKNOWN_TOPIC_OR_PARTITION (or
            // LEADER_NOT_AVAILABLE), so a legal name in that state is waited for.
            .filter(|t| match t.error_code {
                0 | LEADER_NOT_AVAILABLE => true,
                UNKNOWN_TOPIC_OR_PARTITION => t.name.as_ref().is_some_and(|n| is_legal_topic_name(n.0.as_str())),
                _ => false,
            })
            .filter_map(|t| t.name.as_ref().map(|n| Expect::Ready(n.0.to_string(), t.partitions.len().max(1) as i32)))
            .collect(),
        _ => return Vec::new(),
    };
    let deadline = Instant::now() + Duration::from_millis(SETTLE_WAIT_MS_MAX);
    loop {
        let polled: Vec<(bool, Option<ResponseKind>)> = expectations.iter().map(|e| holds(broker, e)).collect();
        if polled.iter().all(|(held, _)| *held) || Instant::now() >= deadline {
            return polled.into_iter().filter_map(|(_, response)| response).collect();
        }
        thread::sleep(Duration::from_millis(SETTLE_POLL_MS));
    }
}

/// Pause after a Produce acknowledged before the data is durable (see its use).
const VISIBILITY_PAUSE_MS: u64 = 50;
/// Pause after a topic config change (see its use).
const CONFIG_PAUSE_MS: u64 = 100;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const LEADER_NOT_AVAILABLE: i16 = 5;
/// Kafka's limit on topic name length.
const TOPIC_NAME_LENGTH_MAX: usize = 249;

/// Kafka's rule: 1 to 249 characters among ASCII letters, digits, '.', '_' and '-'.
fn is_legal_topic_name(name: &str) -> bool {
    let legal_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    !name.is_empty() && name.len() <= TOPIC_NAME_LENGTH_MAX && name.chars().all(legal_char)
}

/// Whether the expectation holds, with the Metadata answer that says so.
fn holds(broker: &mut Broker, expect: &Expect) -> (bool, Option<ResponseKind>) {
    let name = match expect {
        Expect::Ready(name, _) | Expect::Gone(name) => name,
    };
    let topic = MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_string(name.clone()))));
    // Never auto-creating: polling for a deleted topic must not bring it back.
    let request = RequestKind::Metadata(
        MetadataRequest::default().with_topics(Some(vec![topic])).with_allow_auto_topic_creation(false),
    );
    let Some(ResponseKind::Metadata(r)) =
        broker.client.send(ApiKey::Metadata, broker.metadata_version, &request, true).into_response()
    else {
        return (false, None);
    };
    let found = r.topics.iter().find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(name.as_str()));
    let held = match expect {
        Expect::Ready(_, partitions) => {
            found.is_some_and(|t| {
                t.error_code == 0
                    && t.partitions.len() as i32 >= *partitions
                    && t.partitions.iter().all(|p| p.leader_id.0 >= 0)
            }) && leads(broker, name, *partitions)
        }
        Expect::Gone(_) => found.is_none_or(|t| t.error_code != 0),
    };
    (held, Some(ResponseKind::Metadata(r)))
}

/// Whether the broker serves ListOffsets for every partition: Metadata can name a leader
/// before that leader has opened the partition (Kafka answers NOT_LEADER_OR_FOLLOWER for
/// a moment after creating a topic).
fn leads(broker: &mut Broker, name: &str, partitions: i32) -> bool {
    let topic =
        ListOffsetsTopic::default().with_name(TopicName(StrBytes::from_string(name.to_string()))).with_partitions(
            (0..partitions)
                .map(|p| ListOffsetsPartition::default().with_partition_index(p).with_timestamp(-1))
                .collect(),
        );
    let request =
        RequestKind::ListOffsets(ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![topic]));
    match broker.client.send(ApiKey::ListOffsets, broker.list_offsets_version, &request, true).into_response() {
        Some(ResponseKind::ListOffsets(r)) => r.topics.iter().flat_map(|t| &t.partitions).all(|p| p.error_code == 0),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member_steps::MemberRequest;

    fn step(request: Request, pipelined: bool) -> Step {
        Step { version: 0, request, pipelined }
    }

    #[test]
    fn a_pipelined_step_joins_the_run_of_the_step_before_it() {
        let member = || Request::Member(MemberRequest::Collect { slot: "m1", api: ApiKey::JoinGroup });
        let steps = [
            step(Request::ApiVersions, true),
            step(Request::ListGroups, false),
            step(Request::ApiVersions, true),
            step(Request::ListGroups, true),
            step(Request::ApiVersions, false),
            step(member(), false),
            step(Request::ApiVersions, true),
            step(member(), true),
        ];
        // The first step has nothing to follow; a member's step and a step after one
        // each stand alone.
        assert_eq!(pipelines(&steps), vec![0..1, 1..4, 4..5, 5..6, 6..7, 7..8]);
    }
}
