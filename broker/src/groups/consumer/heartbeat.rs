//! ConsumerGroupHeartbeat: joining, leaving, epoch checks, subscription changes, the
//! target assignment, and each member's reconciliation toward it.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::intersects;

use super::split;

use super::Assignment;

use super::ConsumerGroup;

use super::ConsumerMember;

use super::MemberState;

use super::Resolved;

use super::TopicLookup;

use super::RECONCILING_HEARTBEAT_INTERVAL_MS;
use crate::errors;
use crate::groups::assignor::{self, MemberSpec};
use crate::groups::membership::Reason;

/// Member epochs with a meaning of their own.
pub const JOIN_EPOCH: i32 = 0;
pub const LEAVE_EPOCH: i32 = -1;
pub const LEAVE_STATIC_EPOCH: i32 = -2;

#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
}

#[derive(Debug, Clone, Default)]
pub struct HeartbeatRequest {
    /// Made by the client since v1; empty on a v0 join (then `new_member_id` is used).
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    /// `None`: unchanged.
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// The partitions the member owns; `None`: unchanged since its last heartbeat.
    pub owned: Option<Vec<(Uuid, Vec<i32>)>>,
    pub client_id: String,
    pub client_host: String,
    pub new_member_id: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeartbeatResponse {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's full assignment, when it changed or the request was a full one.
    pub assignment: Option<Vec<(Uuid, Vec<i32>)>>,
}

pub type Failure = (i16, String);

fn fail(code: i16, message: &str) -> Failure {
    (code, message.to_string())
}

fn to_assignment(list: &[(Uuid, Vec<i32>)]) -> Assignment {
    let mut a = Assignment::new();
    for (t, parts) in list {
        a.entry(*t).or_default().extend(parts.iter().copied());
    }
    a.retain(|_, s| !s.is_empty());
    a
}

fn to_list(a: &Assignment) -> Vec<(Uuid, Vec<i32>)> {
    a.iter().map(|(t, s)| (*t, s.iter().copied().collect())).collect()
}

fn is_subset(a: &Assignment, b: &Assignment) -> bool {
    a.iter().all(|(t, s)| b.get(t).is_some_and(|o| s.is_subset(o)))
}

impl ConsumerGroup {
    /// One heartbeat. The bool is true if the group epoch moved (persist it).
    pub fn heartbeat(
        &mut self,
        req: HeartbeatRequest,
        topics: &impl TopicLookup,
        settings: Settings,
        now_ms: i64,
    ) -> Result<(HeartbeatResponse, bool), Failure> {
        let epoch_before = self.epoch;
        let result = self.heartbeat_inner(req, topics, settings, now_ms);
        self.refresh_state(now_ms);
        result.map(|r| (r, self.epoch != epoch_before))
    }

    fn heartbeat_inner(
        &mut self,
        req: HeartbeatRequest,
        topics: &impl TopicLookup,
        settings: Settings,
        now_ms: i64,
    ) -> Result<HeartbeatResponse, Failure> {
        if let Some(a) = &req.server_assignor {
            if !assignor::ASSIGNORS.contains(&a.as_str()) {
                return Err(fail(
                    errors::UNSUPPORTED_ASSIGNOR,
                    &format!("Assignor {a} is not supported. Supported assignors: uniform, range."),
                ));
            }
        }
        if let Some(r) = req.subscribed_topic_regex.as_deref().filter(|r| !r.is_empty()) {
            if let Err(e) = regex::Regex::new(r) {
                return Err(fail(
                    errors::INVALID_REGULAR_EXPRESSION,
                    &format!("SubscribedTopicRegex `{r}` is not a valid regular expression: {e}."),
                ));
            }
        }
        if req.member_epoch == LEAVE_EPOCH || req.member_epoch == LEAVE_STATIC_EPOCH {
            return self.leave(req);
        }
        let full_request =
            req.rebalance_timeout_ms != -1 && req.subscribed_topic_names.is_some() && req.owned.is_some();
        let mut changed = false;
        let id = if req.member_epoch == JOIN_EPOCH {
            changed |= self.join(&req, now_ms)?;
            if req.member_id.is_empty() {
                req.new_member_id.clone()
            } else {
                req.member_id.clone()
            }
        } else {
            self.check_epoch(&req)?;
            req.member_id.clone()
        };
        let resubscribe = self.update_member(&id, &req, settings, now_ms);
        changed |= resubscribe;
        changed |= self.match_regexes(topics, resubscribe.then_some(id.as_str()));
        changed |= self.topics_changed(topics);
        if changed {
            self.epoch += 1;
        }
        if self.target_epoch < self.epoch {
            self.compute_target(topics);
        }
        let before = self.members[&id].assigned.clone();
        let owned = req.owned.as_deref().map(to_assignment);
        self.reconcile(&id, owned.as_ref(), now_ms);
        let m = &self.members[&id];
        let send = req.member_epoch == JOIN_EPOCH || full_request || m.assigned != before;
        let converging = m.state != MemberState::Stable || m.epoch != self.target_epoch;
        Ok(HeartbeatResponse {
            member_id: id.clone(),
            member_epoch: m.epoch,
            heartbeat_interval_ms: if converging {
                settings.heartbeat_interval_ms.min(RECONCILING_HEARTBEAT_INTERVAL_MS)
            } else {
                settings.heartbeat_interval_ms
            },
            assignment: send.then(|| to_list(&m.assigned)),
        })
    }

    fn leave(&mut self, req: HeartbeatRequest) -> Result<HeartbeatResponse, Failure> {
        let id = match (&req.instance_id, req.member_id.is_empty()) {
            (Some(instance), true) => self.static_members.get(instance).cloned().unwrap_or_default(),
            _ => req.member_id.clone(),
        };
        if self.remove_member(&id).is_none() {
            return Err(fail(errors::UNKNOWN_MEMBER_ID, &format!("Member {id} is not a member of group {}.", self.id)));
        }
        self.report(&id, Reason::LeaveGroup);
        self.epoch += 1;
        Ok(HeartbeatResponse {
            member_id: id,
            member_epoch: req.member_epoch,
            heartbeat_interval_ms: 0,
            assignment: None,
        })
    }

    /// A (re)joining member starts from nothing; returns true (the membership changed).
    fn join(&mut self, req: &HeartbeatRequest, now_ms: i64) -> Result<bool, Failure> {
        if req.rebalance_timeout_ms < 0 {
            return Err(fail(errors::INVALID_REQUEST, "RebalanceTimeoutMs must be provided when joining."));
        }
        if req.subscribed_topic_names.is_none() && req.subscribed_topic_regex.is_none() {
            return Err(fail(
                errors::INVALID_REQUEST,
                "SubscribedTopicNames or SubscribedTopicRegex must be set when joining.",
            ));
        }
        if req.owned.as_ref().is_some_and(|o| o.iter().any(|(_, p)| !p.is_empty())) {
            return Err(fail(errors::INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."));
        }
        let id = if req.member_id.is_empty() { req.new_member_id.clone() } else { req.member_id.clone() };
        if let Some(instance) = &req.instance_id {
            if let Some(holder) = self.static_members.get(instance) {
                if *holder != id {
                    return Err(fail(
                        errors::UNRELEASED_INSTANCE_ID,
                        &format!("Static member {instance} is still held by member {holder}."),
                    ));
                }
            }
        }
        // A rejoin drops whatever the member held: it has released it on its side.
        let rejoined = self.remove_member(&id).is_some();
        if let Some(instance) = &req.instance_id {
            self.static_members.insert(instance.clone(), id.clone());
        }
        self.members.insert(
            id.clone(),
            ConsumerMember {
                id: id.clone(),
                instance_id: req.instance_id.clone(),
                rack_id: req.rack_id.clone(),
                client_id: req.client_id.clone(),
                client_host: req.client_host.clone(),
                rebalance_timeout_ms: req.rebalance_timeout_ms,
                subscribed: BTreeSet::new(),
                regex: None,
                matched: BTreeSet::new(),
                server_assignor: None,
                epoch: 0,
                previous_epoch: -1,
                state: MemberState::Stable,
                assigned: Assignment::new(),
                revoking: Assignment::new(),
                session_deadline_ms: now_ms,
                revocation_deadline_ms: None,
            },
        );
        self.report(&id, if rejoined { Reason::Rejoined } else { Reason::Joined });
        Ok(true)
    }

    /// A member heartbeating with an epoch must be known and at its epoch, or one
    /// behind if it simply missed the response that moved it (and owns nothing new).
    fn check_epoch(&self, req: &HeartbeatRequest) -> Result<(), Failure> {
        let Some(m) = self.members.get(&req.member_id) else {
            return Err(fail(
                errors::UNKNOWN_MEMBER_ID,
                &format!("Member {} is not a member of group {}.", req.member_id, self.id),
            ));
        };
        let fenced = || {
            fail(errors::FENCED_MEMBER_EPOCH, &format!("The consumer group member has a smaller member epoch ({}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.", req.member_epoch, m.epoch))
        };
        if req.member_epoch > m.epoch {
            return Err(fail(
                errors::FENCED_MEMBER_EPOCH,
                &format!("The consumer group member has a greater member epoch ({}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.", req.member_epoch, m.epoch),
            ));
        }
        if req.member_epoch < m.epoch {
            let lost_response = req.member_epoch == m.previous_epoch
                && req.owned.as_deref().is_some_and(|o| is_subset(&to_assignment(o), &m.assigned));
            if !lost_response {
                return Err(fenced());
            }
        }
        Ok(())
    }

    /// Applies the fields the request changes; true if the assignment depends on them.
    /// A changed regex's matches are found by [`Self::match_regexes`].
    fn update_member(&mut self, id: &str, req: &HeartbeatRequest, settings: Settings, now_ms: i64) -> bool {
        let mut changed = false;
        let m = self.members.get_mut(id).expect("member");
        let before = m.topics();
        if let Some(names) = &req.subscribed_topic_names {
            let names: BTreeSet<String> = names.iter().cloned().collect();
            if names != m.subscribed {
                m.subscribed = names;
                changed = true;
            }
        }
        if let Some(regex) = &req.subscribed_topic_regex {
            let regex = (!regex.is_empty()).then(|| regex.clone());
            if regex != m.regex {
                m.regex = regex;
                m.matched.clear();
                changed = true;
            }
        }
        if changed {
            let after = m.topics();
            self.unsubscribe(&before);
            self.subscribe(&after);
        }
        let m = self.members.get_mut(id).expect("member");
        if let Some(a) = &req.server_assignor {
            if m.server_assignor.as_ref() != Some(a) {
                m.server_assignor = Some(a.clone());
                changed = true;
            }
        }
        if req.rebalance_timeout_ms > 0 {
            m.rebalance_timeout_ms = req.rebalance_timeout_ms;
        }
        if req.rack_id.is_some() {
            m.rack_id = req.rack_id.clone();
        }
        m.session_deadline_ms = now_ms + settings.session_timeout_ms as i64;
        changed
    }

    /// Matches the members' regexes against the topics again when the topics' version
    /// moved since (each regex once for the group, as Kafka resolves them), and applies
    /// the subscriptions that changed: those of the members whose regex now matches
    /// other topics, and `member`'s (its names or regex changed). True if any did.
    fn match_regexes(&mut self, topics: &impl TopicLookup, member: Option<&str>) -> bool {
        // A group without regexes (nearly every one) pays nothing here.
        if self.regexes.is_empty() && member.is_none_or(|id| self.members[id].regex.is_none()) {
            return false;
        }
        let used: BTreeSet<String> = self.members.values().filter_map(|m| m.regex.clone()).collect();
        self.regexes.retain(|r, _| used.contains(r));
        let version = topics.version();
        let mut moved = BTreeSet::new();
        if used.iter().any(|r| self.regexes.get(r).is_none_or(|resolved| resolved.version != Some(version))) {
            let names = topics.topic_names();
            for r in used {
                let resolved = match self.regexes.entry(r.clone()) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(e) => {
                        // Validated as the member sent it.
                        let Ok(regex) = regex::Regex::new(&format!("^(?:{r})$")) else { continue };
                        e.insert(Resolved { regex, version: None, topics: BTreeSet::new() })
                    }
                };
                if resolved.version != Some(version) {
                    let matched: BTreeSet<String> =
                        names.iter().filter(|n| resolved.regex.is_match(n)).cloned().collect();
                    resolved.version = Some(version);
                    if matched != resolved.topics {
                        resolved.topics = matched;
                        moved.insert(r);
                    }
                }
            }
        }
        let ids: Vec<String> = self
            .members
            .values()
            .filter(|m| Some(m.id.as_str()) == member || m.regex.as_ref().is_some_and(|r| moved.contains(r)))
            .map(|m| m.id.clone())
            .collect();
        let mut changed = false;
        for id in ids {
            let m = &self.members[&id];
            let before = m.topics();
            let matched =
                m.regex.as_ref().and_then(|r| self.regexes.get(r)).map(|r| r.topics.clone()).unwrap_or_default();
            let m = self.members.get_mut(&id).expect("member");
            m.matched = matched;
            let after = m.topics();
            if after != before {
                self.unsubscribe(&before);
                self.subscribe(&after);
                changed = true;
            }
        }
        changed
    }

    /// True when a subscribed topic appeared, vanished or changed its partition count
    /// since the target assignment was computed.
    fn topics_changed(&mut self, topics: &impl TopicLookup) -> bool {
        let now: BTreeMap<String, Option<(Uuid, i32)>> =
            self.subscriptions.keys().map(|t| (t.clone(), topics.topic_by_name(t))).collect();
        if now != self.topics_seen {
            self.topics_seen = now;
            return true;
        }
        false
    }

    /// Runs the assignor the members prefer most (uniform by default).
    fn compute_target(&mut self, topics: &impl TopicLookup) {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = &m.server_assignor {
                *votes.entry(a.as_str()).or_default() += 1;
            }
        }
        let name = votes.iter().max_by_key(|(n, v)| (**v, std::cmp::Reverse(**n))).map(|(n, _)| n.to_string());
        self.assignor = name.unwrap_or_else(|| assignor::UNIFORM.to_string());
        let mut partitions = BTreeMap::new();
        let subscribed_ids: BTreeMap<&str, BTreeSet<Uuid>> = self
            .members
            .iter()
            .map(|(id, m)| {
                let ids = m.topics().into_iter().filter_map(|t| topics.topic_by_name(&t)).map(|(tid, count)| {
                    partitions.insert(tid, count);
                    tid
                });
                (id.as_str(), ids.collect())
            })
            .collect();
        let empty = Assignment::new();
        let specs: Vec<MemberSpec> = subscribed_ids
            .iter()
            .map(|(id, ids)| MemberSpec { id, topics: ids, current: self.target.get(*id).unwrap_or(&empty) })
            .collect();
        self.target = assignor::assign(&self.assignor, &specs, &partitions);
        self.target_epoch = self.epoch;
    }

    /// Moves one member toward its target (Kafka's CurrentAssignmentBuilder).
    fn reconcile(&mut self, id: &str, owned: Option<&Assignment>, now_ms: i64) {
        let target = self.target.get(id).cloned().unwrap_or_default();
        let m = self.members.get_mut(id).expect("member");
        if m.state == MemberState::UnrevokedPartitions {
            let revoked = owned.is_some_and(|o| !intersects(o, &m.revoking));
            if !revoked {
                // Still revoking; a newer target may add to what it must give up.
                let (keep, give_up) = split(&m.assigned, &target);
                for (t, parts) in give_up {
                    m.revoking.entry(t).or_default().extend(parts);
                }
                m.assigned = keep;
                return;
            }
            let released = std::mem::take(&mut m.revoking);
            for (t, parts) in released {
                for p in parts {
                    if self.owners.get(&(t, p)).map(String::as_str) == Some(id) {
                        self.owners.remove(&(t, p));
                    }
                }
            }
        }
        let m = self.members.get_mut(id).expect("member");
        if m.state == MemberState::Stable && m.epoch == self.target_epoch {
            return;
        }
        let (keep, give_up) = split(&m.assigned, &target);
        if !give_up.is_empty() {
            m.assigned = keep;
            m.revoking = give_up;
            m.state = MemberState::UnrevokedPartitions;
            m.revocation_deadline_ms = Some(now_ms + m.rebalance_timeout_ms as i64);
            return;
        }
        let (_, wanted) = split(&target, &m.assigned);
        let mut waiting = false;
        for (t, parts) in wanted {
            for p in parts {
                match self.owners.get(&(t, p)) {
                    Some(holder) if holder != id => waiting = true,
                    _ => {
                        self.owners.insert((t, p), id.to_string());
                        m.assigned.entry(t).or_default().insert(p);
                    }
                }
            }
        }
        if m.epoch != self.target_epoch {
            m.previous_epoch = m.epoch;
            m.epoch = self.target_epoch;
        }
        m.state = if waiting { MemberState::UnreleasedPartitions } else { MemberState::Stable };
        m.revocation_deadline_ms = None;
    }
}
