//! The classic group's events: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the
//! timers (`tick`), with the join and sync phases of a rebalance between them.

use std::collections::HashMap;

use bytes::Bytes;

use super::{
    Action, ClassicGroup, ClassicState, JoinOutcome, JoinRequest, JoinResult, Member, SyncOutcome, SyncRequest,
    SyncResult, NEW_MEMBER_JOIN_TIMEOUT_MS,
};
use crate::errors;
use crate::groups::membership::Reason;

impl ClassicGroup {
    pub fn join(&mut self, req: JoinRequest, now_ms: i64, out: &mut Vec<Action>) -> JoinOutcome {
        let done = |code| JoinOutcome::Done(JoinResult::error(code, &req.member_id));
        if req.session_timeout_ms < self.limits.session_timeout_min_ms
            || req.session_timeout_ms > self.limits.session_timeout_max_ms
        {
            return done(errors::INVALID_SESSION_TIMEOUT);
        }
        if self.state == ClassicState::Dead {
            return done(errors::COORDINATOR_NOT_AVAILABLE);
        }
        if !self.supports_protocols(&req.protocol_type, &req.protocols) {
            return done(errors::INCONSISTENT_GROUP_PROTOCOL);
        }
        if req.member_id.is_empty() {
            self.join_new_member(req, now_ms, out)
        } else if self.pending_members.contains_key(&req.member_id) {
            let id = req.member_id.clone();
            self.add_member_and_rebalance(id, req, now_ms, out)
        } else {
            self.join_known_member(req, now_ms, out)
        }
    }

    fn join_new_member(&mut self, req: JoinRequest, now_ms: i64, out: &mut Vec<Action>) -> JoinOutcome {
        let new_id = req.new_member_id.clone();
        assert!(!new_id.is_empty(), "the caller supplies a new member id");
        match req.instance_id.clone() {
            Some(instance) => match self.static_members.get(&instance).cloned() {
                Some(old_id) => self.replace_static_member(&instance, &old_id, new_id, req, now_ms, out),
                None => self.add_member_and_rebalance(new_id, req, now_ms, out),
            },
            None if req.require_known_member_id => {
                let deadline = now_ms + req.session_timeout_ms as i64;
                self.pending_members.insert(new_id.clone(), deadline);
                JoinOutcome::Done(JoinResult::error(errors::MEMBER_ID_REQUIRED, &new_id))
            }
            None => self.add_member_and_rebalance(new_id, req, now_ms, out),
        }
    }

    fn join_known_member(&mut self, req: JoinRequest, now_ms: i64, out: &mut Vec<Action>) -> JoinOutcome {
        if let Err(code) = self.validate_member(&req.member_id, req.instance_id.as_deref()) {
            return JoinOutcome::Done(JoinResult::error(code, &req.member_id));
        }
        let id = req.member_id.clone();
        let member = &self.members[&id];
        let same_protocols = member.protocols == req.protocols;
        match self.state {
            ClassicState::PreparingRebalance => self.update_member_and_rebalance(req, now_ms, out),
            ClassicState::CompletingRebalance if same_protocols => {
                // It missed the join response: answer with the current generation again.
                let is_leader = self.leader.as_deref() == Some(id.as_str());
                JoinOutcome::Done(self.join_result(&id, is_leader))
            }
            ClassicState::CompletingRebalance => self.update_member_and_rebalance(req, now_ms, out),
            ClassicState::Stable => {
                // A leader's join forces a rebalance (it may have seen topic changes the
                // members' metadata does not show); a follower without changes just
                // gets the current generation so it can SyncGroup.
                if self.leader.as_deref() == Some(id.as_str()) || !same_protocols {
                    self.update_member_and_rebalance(req, now_ms, out)
                } else {
                    JoinOutcome::Done(self.join_result(&id, false))
                }
            }
            ClassicState::Empty | ClassicState::Dead => {
                JoinOutcome::Done(JoinResult::error(errors::UNKNOWN_MEMBER_ID, &id))
            }
        }
    }

    fn add_member_and_rebalance(
        &mut self,
        id: String,
        req: JoinRequest,
        now_ms: i64,
        out: &mut Vec<Action>,
    ) -> JoinOutcome {
        if self.state == ClassicState::PreparingRebalance && self.initial_delay_remaining_ms.is_some() {
            self.new_member_added = true;
        }
        if self.members.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(id.clone());
        }
        if let Some(instance) = &req.instance_id {
            self.static_members.insert(instance.clone(), id.clone());
        }
        self.pending_members.remove(&id);
        let member = Member {
            id: id.clone(),
            instance_id: req.instance_id,
            client_id: req.client_id,
            client_host: req.client_host,
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            protocol_type: req.protocol_type,
            protocols: req.protocols,
            assignment: Bytes::new(),
            awaiting_join: true,
            awaiting_sync: false,
            is_new: true,
            heartbeat_deadline_ms: now_ms + NEW_MEMBER_JOIN_TIMEOUT_MS,
        };
        self.members.insert(id.clone(), member);
        self.report(&id, Reason::Joined, out);
        self.rebalance_or_complete_join(now_ms, out);
        JoinOutcome::Wait { member_id: id }
    }

    fn update_member_and_rebalance(&mut self, req: JoinRequest, now_ms: i64, out: &mut Vec<Action>) -> JoinOutcome {
        let id = req.member_id.clone();
        let m = self.members.get_mut(&id).expect("validated member");
        m.protocols = req.protocols;
        m.rebalance_timeout_ms = req.rebalance_timeout_ms;
        m.session_timeout_ms = req.session_timeout_ms;
        m.client_id = req.client_id;
        m.client_host = req.client_host;
        m.awaiting_join = true;
        self.rebalance_or_complete_join(now_ms, out);
        JoinOutcome::Wait { member_id: id }
    }

    /// KIP-345: a known group.instance.id joins without its member id (a restarted
    /// static member). The new id takes the old member's place and assignment; whoever
    /// still holds the old id is fenced.
    fn replace_static_member(
        &mut self,
        instance: &str,
        old_id: &str,
        new_id: String,
        req: JoinRequest,
        now_ms: i64,
        out: &mut Vec<Action>,
    ) -> JoinOutcome {
        let mut member = self.members.shift_remove(old_id).expect("a static member is a member");
        if member.awaiting_join {
            out.push(Action::CompleteJoin {
                member_id: old_id.to_string(),
                result: JoinResult::error(errors::FENCED_INSTANCE_ID, old_id),
            });
        }
        if member.awaiting_sync {
            out.push(Action::CompleteSync {
                member_id: old_id.to_string(),
                result: SyncResult::error(errors::FENCED_INSTANCE_ID),
            });
        }
        if self.leader.as_deref() == Some(old_id) {
            self.leader = Some(new_id.clone());
        }
        if self.pending_sync.remove(old_id) {
            self.pending_sync.insert(new_id.clone());
        }
        self.static_members.insert(instance.to_string(), new_id.clone());
        let protocols_changed = member.protocols != req.protocols;
        member.id = new_id.clone();
        member.protocols = req.protocols;
        member.rebalance_timeout_ms = req.rebalance_timeout_ms;
        member.session_timeout_ms = req.session_timeout_ms;
        member.awaiting_join = true;
        member.awaiting_sync = false;
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms as i64;
        self.members.insert(new_id.clone(), member);
        self.report(old_id, Reason::InstanceReplaced, out);
        self.report(&new_id, Reason::Joined, out);
        match self.state {
            ClassicState::Stable if !protocols_changed || self.select_protocol() == self.protocol => {
                // Nothing the assignment depends on changed: no rebalance.
                self.members.get_mut(&new_id).expect("just inserted").awaiting_join = false;
                out.push(Action::Persist { assignment_of: None });
                let is_leader = self.leader.as_deref() == Some(new_id.as_str());
                let mut result = self.join_result(&new_id, is_leader);
                result.skip_assignment = is_leader && req.supports_skip_assignment;
                JoinOutcome::Done(result)
            }
            ClassicState::Stable | ClassicState::CompletingRebalance => {
                // The leader may already have assigned to the old id: rebalance.
                self.prepare_rebalance(now_ms, out);
                JoinOutcome::Wait { member_id: new_id }
            }
            _ => {
                self.maybe_complete_join_phase(now_ms, out);
                JoinOutcome::Wait { member_id: new_id }
            }
        }
    }

    pub fn sync_group(&mut self, req: SyncRequest, now_ms: i64, out: &mut Vec<Action>) -> SyncOutcome {
        let done = |code| SyncOutcome::Done(SyncResult::error(code));
        if self.state == ClassicState::Dead {
            return done(errors::COORDINATOR_NOT_AVAILABLE);
        }
        if let Err(code) = self.validate_member(&req.member_id, req.instance_id.as_deref()) {
            return done(code);
        }
        if req.generation != self.generation {
            return done(errors::ILLEGAL_GENERATION);
        }
        let inconsistent =
            |asked: &Option<String>, actual: &Option<String>| matches!((asked, actual), (Some(a), Some(b)) if a != b);
        if inconsistent(&req.protocol_type, &self.protocol_type) || inconsistent(&req.protocol, &self.protocol) {
            return done(errors::INCONSISTENT_GROUP_PROTOCOL);
        }
        let id = req.member_id.clone();
        self.note_heartbeat(&id, now_ms);
        match self.state {
            ClassicState::PreparingRebalance => done(errors::REBALANCE_IN_PROGRESS),
            ClassicState::CompletingRebalance => {
                self.members.get_mut(&id).expect("validated member").awaiting_sync = true;
                self.pending_sync.remove(&id);
                if self.leader.as_deref() == Some(id.as_str()) && !self.assignment_persisting {
                    let mut given: HashMap<String, Bytes> = req.assignments.into_iter().collect();
                    for m in self.members.values_mut() {
                        m.assignment = given.remove(&m.id).unwrap_or_default();
                    }
                    self.assignment_persisting = true;
                    out.push(Action::Persist { assignment_of: Some(self.generation) });
                }
                SyncOutcome::Wait { member_id: id }
            }
            ClassicState::Stable => {
                self.pending_sync.remove(&id);
                let m = &self.members[&id];
                SyncOutcome::Done(SyncResult {
                    error: errors::NONE,
                    protocol_type: self.protocol_type.clone(),
                    protocol: self.protocol.clone(),
                    assignment: m.assignment.clone(),
                })
            }
            ClassicState::Empty | ClassicState::Dead => done(errors::UNKNOWN_MEMBER_ID),
        }
    }

    /// The shell wrote (or failed to write) the leader's assignment of `generation`.
    pub fn assignment_persisted(&mut self, generation: i32, error: i16, now_ms: i64, out: &mut Vec<Action>) {
        if self.state != ClassicState::CompletingRebalance
            || generation != self.generation
            || !self.assignment_persisting
        {
            return;
        }
        self.assignment_persisting = false;
        if error != errors::NONE {
            self.reset_and_propagate_assignment(error, now_ms, out);
            self.rebalance_or_complete_join(now_ms, out);
            return;
        }
        self.propagate_assignment(errors::NONE, now_ms, out);
        self.transition(ClassicState::Stable, now_ms);
    }

    pub fn heartbeat(&mut self, member_id: &str, instance_id: Option<&str>, generation: i32, now_ms: i64) -> i16 {
        if self.state == ClassicState::Dead {
            return errors::COORDINATOR_NOT_AVAILABLE;
        }
        if let Err(code) = self.validate_member(member_id, instance_id) {
            return code;
        }
        if generation != self.generation {
            return errors::ILLEGAL_GENERATION;
        }
        match self.state {
            ClassicState::Empty | ClassicState::Dead => errors::UNKNOWN_MEMBER_ID,
            ClassicState::PreparingRebalance => {
                self.note_heartbeat(member_id, now_ms);
                errors::REBALANCE_IN_PROGRESS
            }
            ClassicState::CompletingRebalance | ClassicState::Stable => {
                self.note_heartbeat(member_id, now_ms);
                errors::NONE
            }
        }
    }

    /// LeaveGroup for (member id, instance id) pairs; an empty member id with an
    /// instance id removes that static member (the admin path). Errors per member, or
    /// one for the whole request.
    pub fn leave(
        &mut self,
        leaving: &[(String, Option<String>)],
        now_ms: i64,
        out: &mut Vec<Action>,
    ) -> Result<Vec<i16>, i16> {
        if self.state == ClassicState::Dead {
            return Err(errors::COORDINATOR_NOT_AVAILABLE);
        }
        let mut codes = Vec::with_capacity(leaving.len());
        let mut removed = Vec::new();
        for (member_id, instance_id) in leaving {
            let code = if member_id.is_empty() {
                match instance_id.as_ref().and_then(|i| self.static_members.get(i)) {
                    Some(id) => {
                        removed.push((id.clone(), Reason::AdminRemoval));
                        errors::NONE
                    }
                    None => errors::UNKNOWN_MEMBER_ID,
                }
            } else if self.pending_members.remove(member_id).is_some() {
                errors::NONE
            } else {
                match self.validate_member(member_id, instance_id.as_deref()) {
                    Ok(()) => {
                        removed.push((member_id.clone(), Reason::LeaveGroup));
                        errors::NONE
                    }
                    Err(code) => code,
                }
            };
            codes.push(code);
        }
        for (id, reason) in removed {
            self.remove_member_and_update(&id, reason, now_ms, out);
        }
        if self.state == ClassicState::PreparingRebalance {
            self.maybe_complete_join_phase(now_ms, out);
        }
        Ok(codes)
    }

    /// Fires every deadline that passed: pending member ids, member sessions, the end
    /// of the join phase (initial delay or rebalance timeout) and the pending-sync timeout.
    pub fn tick(&mut self, now_ms: i64, out: &mut Vec<Action>) {
        let expired: Vec<String> =
            self.pending_members.iter().filter(|(_, d)| **d <= now_ms).map(|(id, _)| id.clone()).collect();
        for id in expired {
            self.pending_members.remove(&id);
            self.maybe_complete_join_phase(now_ms, out);
        }
        let expired: Vec<(String, Reason)> = self
            .members
            .values()
            .filter(|m| m.session_expired(now_ms))
            .map(|m| (m.id.clone(), if m.is_new { Reason::NewMemberJoinTimeout } else { Reason::SessionExpired }))
            .collect();
        for (id, reason) in expired {
            self.remove_member_and_update(&id, reason, now_ms, out);
        }
        if self.state == ClassicState::PreparingRebalance && self.join_deadline_ms.is_some_and(|d| d <= now_ms) {
            match self.initial_delay_remaining_ms {
                Some(remaining) if self.new_member_added && remaining > 0 => {
                    // Members keep arriving: wait one more delay, within the rebalance timeout.
                    let delay = (self.limits.initial_rebalance_delay_ms as i64).min(remaining);
                    self.new_member_added = false;
                    self.initial_delay_remaining_ms = Some(remaining - delay);
                    self.join_deadline_ms = Some(now_ms + delay);
                }
                _ => self.complete_join(now_ms, out),
            }
        }
        let syncing = matches!(self.state, ClassicState::CompletingRebalance | ClassicState::Stable);
        if syncing && self.sync_deadline_ms.is_some_and(|d| d <= now_ms) {
            self.sync_deadline_ms = None;
            let missing: Vec<String> = std::mem::take(&mut self.pending_sync).into_iter().collect();
            if !missing.is_empty() {
                for id in &missing {
                    self.drop_member(id, Reason::SyncTimeout, out);
                }
                self.prepare_rebalance(now_ms, out);
            }
        }
    }

    fn note_heartbeat(&mut self, member_id: &str, now_ms: i64) {
        if let Some(m) = self.members.get_mut(member_id) {
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms as i64;
        }
    }

    /// Removes a member without rebalancing and tells it: a parked JoinGroup or
    /// SyncGroup is answered UNKNOWN_MEMBER_ID (as its next heartbeat, sync or commit
    /// will be), and the removal is reported.
    fn drop_member(&mut self, member_id: &str, reason: Reason, out: &mut Vec<Action>) -> bool {
        let Some(m) = self.remove_member(member_id) else {
            return false;
        };
        if m.awaiting_join {
            out.push(Action::CompleteJoin {
                member_id: m.id.clone(),
                result: JoinResult::error(errors::UNKNOWN_MEMBER_ID, ""),
            });
        }
        if m.awaiting_sync {
            out.push(Action::CompleteSync {
                member_id: m.id.clone(),
                result: SyncResult::error(errors::UNKNOWN_MEMBER_ID),
            });
        }
        self.report(member_id, reason, out);
        true
    }

    fn remove_member_and_update(&mut self, member_id: &str, reason: Reason, now_ms: i64, out: &mut Vec<Action>) {
        if !self.drop_member(member_id, reason, out) {
            return;
        }
        match self.state {
            ClassicState::Stable | ClassicState::CompletingRebalance => self.rebalance_or_complete_join(now_ms, out),
            ClassicState::PreparingRebalance if self.all_members_joined() => self.complete_join(now_ms, out),
            _ => {}
        }
    }

    fn rebalance_or_complete_join(&mut self, now_ms: i64, out: &mut Vec<Action>) {
        if matches!(self.state, ClassicState::Stable | ClassicState::CompletingRebalance | ClassicState::Empty) {
            self.prepare_rebalance(now_ms, out);
        } else {
            self.maybe_complete_join_phase(now_ms, out);
        }
    }

    /// Completes the join phase early once every member rejoined, except during the
    /// initial delay, whose point is to wait for more members.
    fn maybe_complete_join_phase(&mut self, now_ms: i64, out: &mut Vec<Action>) {
        if self.state == ClassicState::PreparingRebalance
            && self.initial_delay_remaining_ms.is_none()
            && self.all_members_joined()
        {
            self.complete_join(now_ms, out);
        }
    }

    fn prepare_rebalance(&mut self, now_ms: i64, out: &mut Vec<Action>) {
        if self.state == ClassicState::CompletingRebalance {
            self.reset_and_propagate_assignment(errors::REBALANCE_IN_PROGRESS, now_ms, out);
        }
        self.sync_deadline_ms = None;
        self.assignment_persisting = false;
        let initial = self.state == ClassicState::Empty;
        self.transition(ClassicState::PreparingRebalance, now_ms);
        if initial {
            let delay = self.limits.initial_rebalance_delay_ms.max(0) as i64;
            if delay == 0 {
                self.complete_join(now_ms, out);
                return;
            }
            self.initial_delay_remaining_ms = Some((self.rebalance_timeout_ms() - delay).max(0));
            self.new_member_added = false;
            self.join_deadline_ms = Some(now_ms + delay);
        } else {
            self.join_deadline_ms = Some(now_ms + self.rebalance_timeout_ms());
            if self.all_members_joined() {
                self.complete_join(now_ms, out);
            }
        }
    }

    /// Closes the join phase: every member rejoined, or its rebalance timeout (or the
    /// initial delay) passed and the dynamic members that did not rejoin are dropped.
    fn complete_join(&mut self, now_ms: i64, out: &mut Vec<Action>) {
        let missing: Vec<String> = self
            .members
            .values()
            .filter(|m| !m.awaiting_join && m.instance_id.is_none())
            .map(|m| m.id.clone())
            .collect();
        // Kafka's rule, and what keeps a partition from having two owners: a live
        // member is never left out of a generation before the rebalance timeout.
        let early = self.join_deadline_ms.is_some_and(|d| now_ms < d);
        assert!(
            !early || missing.is_empty(),
            "group {}: join phase closing {} ms before its timeout without {missing:?}",
            self.id,
            self.join_deadline_ms.unwrap_or(now_ms) - now_ms
        );
        self.join_deadline_ms = None;
        self.initial_delay_remaining_ms = None;
        self.new_member_added = false;
        for id in missing {
            self.drop_member(&id, Reason::RebalanceTimeout, out);
        }
        if !self.elect_joined_leader() && !self.members.is_empty() {
            // Only static members that have not rejoined are left: wait for them (or for
            // their sessions to expire) one more rebalance timeout.
            self.join_deadline_ms = Some(now_ms + self.rebalance_timeout_ms());
            return;
        }
        self.generation += 1;
        self.pending_sync.clear();
        if self.members.is_empty() {
            self.protocol = None;
            self.transition(ClassicState::Empty, now_ms);
            out.push(Action::Persist { assignment_of: None });
            return;
        }
        self.protocol = self.select_protocol();
        self.transition(ClassicState::CompletingRebalance, now_ms);
        let ids: Vec<&str> = self.members.keys().map(String::as_str).collect();
        tracing::info!(group = %self.id, generation = self.generation, members = ids.len(), ids = ?ids, protocol = ?self.protocol, "join phase completed");
        let leader = self.leader.clone().unwrap_or_default();
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let result = self.join_result(&id, id == leader);
            let m = self.members.get_mut(&id).expect("listed member");
            if m.awaiting_join {
                m.awaiting_join = false;
                out.push(Action::CompleteJoin { member_id: id.clone(), result });
            }
            m.is_new = false;
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms as i64;
            self.pending_sync.insert(id);
        }
        self.sync_deadline_ms = Some(now_ms + self.rebalance_timeout_ms());
    }

    /// Keeps the leader if it rejoined, else picks a member that did.
    fn elect_joined_leader(&mut self) -> bool {
        let Some(leader) = self.leader.clone() else {
            return false;
        };
        if self.members.get(&leader).is_some_and(|m| m.awaiting_join) {
            return true;
        }
        match self.members.values().find(|m| m.awaiting_join) {
            Some(m) => {
                self.leader = Some(m.id.clone());
                true
            }
            None => false,
        }
    }

    fn reset_and_propagate_assignment(&mut self, error: i16, now_ms: i64, out: &mut Vec<Action>) {
        assert_eq!(
            self.state,
            ClassicState::CompletingRebalance,
            "assignments are only reset while completing a rebalance"
        );
        for m in self.members.values_mut() {
            m.assignment = Bytes::new();
        }
        self.propagate_assignment(error, now_ms, out);
    }

    /// Answers every parked SyncGroup with its member's assignment (or `error`).
    fn propagate_assignment(&mut self, error: i16, now_ms: i64, out: &mut Vec<Action>) {
        for m in self.members.values_mut() {
            if !m.awaiting_sync {
                continue;
            }
            m.awaiting_sync = false;
            let result = SyncResult {
                error,
                protocol_type: self.protocol_type.clone(),
                protocol: self.protocol.clone(),
                assignment: if error == errors::NONE { m.assignment.clone() } else { Bytes::new() },
            };
            out.push(Action::CompleteSync { member_id: m.id.clone(), result });
            if error == errors::NONE {
                m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms as i64;
            }
        }
    }
}
