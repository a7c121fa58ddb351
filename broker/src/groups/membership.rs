//! Members entering and leaving groups, with the reason, as both state machines report
//! them: the shell logs every change and counts it for `/metrics`
//! (`keel_group_member_changes_total`).
//!
//! Why a report rather than a log line inside the machines: a membership change is the
//! one thing a rebalance bug shows, so tests assert on the reports, and the counts let
//! an operator see members dropping out without reading the log.

/// Why a member entered or left a group. Each reason belongs to one [`Change`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// A new member joined (its first JoinGroup with its id, or a KIP-848 join).
    Joined,
    /// A KIP-848 member joined again with its id (epoch 0): it had dropped its partitions.
    Rejoined,
    /// The member asked to leave (LeaveGroup, or a KIP-848 leave heartbeat).
    LeaveGroup,
    /// An admin removed it (LeaveGroup by group.instance.id without a member id).
    AdminRemoval,
    /// No heartbeat within its session timeout.
    SessionExpired,
    /// A new member's parked JoinGroup outlived the new-member join timeout.
    NewMemberJoinTimeout,
    /// It did not rejoin before the join phase's rebalance timeout.
    RebalanceTimeout,
    /// It did not send SyncGroup before the sync phase's rebalance timeout.
    SyncTimeout,
    /// A KIP-848 member did not revoke partitions within its rebalance timeout.
    RevocationTimeout,
    /// KIP-345: another member joined with its group.instance.id.
    InstanceReplaced,
}

/// What happened to the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Added,
    /// It left of its own accord.
    Left,
    /// The coordinator removed it (timeouts, admin).
    Removed,
    /// Another member took its place; its requests now fail with FENCED_INSTANCE_ID.
    Fenced,
}

impl Reason {
    pub const ALL: [Reason; 10] = [
        Reason::Joined,
        Reason::Rejoined,
        Reason::LeaveGroup,
        Reason::AdminRemoval,
        Reason::SessionExpired,
        Reason::NewMemberJoinTimeout,
        Reason::RebalanceTimeout,
        Reason::SyncTimeout,
        Reason::RevocationTimeout,
        Reason::InstanceReplaced,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Reason::Joined => "joined",
            Reason::Rejoined => "rejoined",
            Reason::LeaveGroup => "leave_group",
            Reason::AdminRemoval => "admin_removal",
            Reason::SessionExpired => "session_expired",
            Reason::NewMemberJoinTimeout => "new_member_join_timeout",
            Reason::RebalanceTimeout => "rebalance_timeout",
            Reason::SyncTimeout => "sync_timeout",
            Reason::RevocationTimeout => "revocation_timeout",
            Reason::InstanceReplaced => "instance_replaced",
        }
    }

    pub fn change(self) -> Change {
        match self {
            Reason::Joined | Reason::Rejoined => Change::Added,
            Reason::LeaveGroup => Change::Left,
            Reason::AdminRemoval
            | Reason::SessionExpired
            | Reason::NewMemberJoinTimeout
            | Reason::RebalanceTimeout
            | Reason::SyncTimeout
            | Reason::RevocationTimeout => Change::Removed,
            Reason::InstanceReplaced => Change::Fenced,
        }
    }
}

impl Change {
    pub fn name(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Left => "left",
            Change::Removed => "removed",
            Change::Fenced => "fenced",
        }
    }
}

/// One member entering or leaving; `generation` is the group's generation (classic) or
/// epoch (KIP-848) when it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipChange {
    pub member_id: String,
    pub reason: Reason,
    pub generation: i32,
    /// Members left in the group after the change.
    pub members: usize,
}

/// The group protocols, as the metric's `protocol` label spells them.
pub const PROTOCOLS: [&str; 2] = ["classic", "consumer"];

/// Per-shard counts of membership changes by protocol and reason.
#[derive(Debug, Clone, Default)]
pub struct MembershipCounts {
    counts: [[u64; Reason::ALL.len()]; PROTOCOLS.len()],
}

impl MembershipCounts {
    pub fn count(&mut self, protocol: &str, reason: Reason) {
        let p = PROTOCOLS.iter().position(|n| *n == protocol);
        let p = p.unwrap_or_else(|| panic!("unknown group protocol {protocol}"));
        let r = Reason::ALL.iter().position(|x| *x == reason).expect("every reason is listed");
        self.counts[p][r] += 1;
    }

    /// (protocol, reason, count) for every pair, zeros included.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, Reason, u64)> + '_ {
        PROTOCOLS
            .iter()
            .enumerate()
            .flat_map(move |(p, name)| Reason::ALL.iter().enumerate().map(move |(r, x)| (*name, *x, self.counts[p][r])))
    }
}

/// Logs a change and counts it.
pub fn record(counts: &mut MembershipCounts, protocol: &'static str, group: &str, c: &MembershipChange) {
    tracing::info!(
        group,
        protocol,
        member = %c.member_id,
        change = c.reason.change().name(),
        reason = c.reason.name(),
        generation = c.generation,
        members = c.members,
        "group membership changed"
    );
    counts.count(protocol, c.reason);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_cover_every_protocol_and_reason() {
        let mut counts = MembershipCounts::default();
        counts.count("classic", Reason::LeaveGroup);
        counts.count("classic", Reason::LeaveGroup);
        counts.count("consumer", Reason::RevocationTimeout);
        let all: Vec<_> = counts.iter().collect();
        assert_eq!(all.len(), PROTOCOLS.len() * Reason::ALL.len());
        assert!(all.contains(&("classic", Reason::LeaveGroup, 2)));
        assert!(all.contains(&("consumer", Reason::RevocationTimeout, 1)));
        assert_eq!(all.iter().map(|(_, _, n)| n).sum::<u64>(), 3);
    }
}
