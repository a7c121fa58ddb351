//! Raft's safety properties, checked against what the simulated nodes report and hold.
//! Each check cites the section of the Raft paper (Ongaro & Ousterhout, 2014) it tests.

use std::collections::BTreeMap;
use std::ops::Range;

use bytes::Bytes;
use keel_raft::{Entry, GroupId, NodeId};

/// A committed entry: its term and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub term: u64,
    pub data: Bytes,
}

#[derive(Default)]
pub struct Checker {
    /// (group, term) → the node that led it.
    leaders: BTreeMap<(GroupId, u64), NodeId>,
    /// Every entry some node applied, hence committed: group → index → entry.
    committed: BTreeMap<GroupId, BTreeMap<u64, Committed>>,
    /// The Kafka offsets each applied entry took: group → index → offsets.
    offsets: BTreeMap<GroupId, BTreeMap<u64, Range<u64>>>,
    /// Per node and group, the last index applied since the node's last boot.
    applied: BTreeMap<(NodeId, GroupId), u64>,
    /// (group, term) → the highest index known committed when some node first reached
    /// that term: those entries were committed in earlier terms.
    committed_before_term: BTreeMap<(GroupId, u64), u64>,
}

pub type Violation = String;

impl Checker {
    /// Election Safety (§5.2): at most one leader can be elected in a given term.
    pub fn leader_elected(&mut self, group: GroupId, term: u64, node: NodeId) -> Result<(), Violation> {
        match self.leaders.insert((group, term), node) {
            Some(other) if other != node => {
                Err(format!("Election Safety (§5.2): group {group} term {term} has leaders {other} and {node}"))
            }
            _ => Ok(()),
        }
    }

    /// A node is at `term` in `group`; the first sighting of a term fixes which entries
    /// must be in its leader's log.
    pub fn term_seen(&mut self, group: GroupId, term: u64) {
        let known = self.committed.get(&group).and_then(|entries| entries.keys().last()).copied().unwrap_or(0);
        self.committed_before_term.entry((group, term)).or_insert(known);
    }

    /// Leader Completeness (§5.4): "if a log entry is committed in a given term, then that
    /// entry will be present in the logs of the leaders for all higher-numbered terms".
    /// Entries known committed before any node reached `term` were committed in a lower
    /// term (every vote for `term` is cast later, by a node not yet past `term`). A leader
    /// of a lower term may still be elected late, from a delayed vote, and lack later
    /// commits: it is then a stale leader that cannot commit. `log` is from index 1.
    pub fn leader_log(&self, group: GroupId, term: u64, node: NodeId, log: &[Entry]) -> Result<(), Violation> {
        let Some(committed) = self.committed.get(&group) else { return Ok(()) };
        let Some(&before) = self.committed_before_term.get(&(group, term)) else {
            return Err(format!("checker: leader {node} of group {group} in term {term} never seen at that term"));
        };
        for (&index, entry) in committed.range(..=before) {
            let held = log.get(index as usize - 1);
            let same = held.is_some_and(|held| held.term == entry.term && held.data == entry.data);
            if !same {
                return Err(format!(
                    "Leader Completeness (§5.4): leader {node} of group {group} term {term} lacks committed \
                     entry {index} (term {}), holds {:?}",
                    entry.term,
                    held.map(|held| held.term)
                ));
            }
        }
        Ok(())
    }

    /// The node restarted: its state machine starts again from index 0.
    pub fn rebooted(&mut self, node: NodeId) {
        self.applied.retain(|(applier, _), _| *applier != node);
    }

    /// State Machine Safety (§5.4.3): no two nodes apply different entries at one index;
    /// each node applies in index order without gaps; every replica gives an entry the same
    /// Kafka offsets.
    pub fn applied(
        &mut self,
        node: NodeId,
        group: GroupId,
        entry: &Entry,
        offsets: Range<u64>,
    ) -> Result<(), Violation> {
        let last = self.applied.entry((node, group)).or_insert(0);
        if entry.index != *last + 1 {
            return Err(format!(
                "State Machine Safety (§5.4.3): node {node} group {group} applied {} after {}",
                entry.index, *last
            ));
        }
        *last = entry.index;
        let applied = Committed { term: entry.term, data: entry.data.clone() };
        let committed = self.committed.entry(group).or_default();
        if let Some(earlier) = committed.get(&entry.index) {
            if *earlier != applied {
                return Err(format!(
                    "State Machine Safety (§5.4.3): group {group} index {} applied as term {} ({:?}) on node \
                     {node} but as term {} ({:?}) elsewhere",
                    entry.index, entry.term, applied.data, earlier.term, earlier.data
                ));
            }
        } else {
            committed.insert(entry.index, applied);
        }
        let known = self.offsets.entry(group).or_default().entry(entry.index).or_insert(offsets.clone());
        if *known != offsets {
            return Err(format!(
                "offset translation: group {group} index {} has Kafka offsets {offsets:?} on node {node}, \
                 {known:?} elsewhere",
                entry.index
            ));
        }
        Ok(())
    }

    /// Committed entries are never lost (§5.4, with the commit rule of §5.3): every
    /// committed entry is on the disk of a majority, crashed nodes included. `disks` holds
    /// each node's durable log from index 1.
    pub fn durable(&self, group: GroupId, disks: &[&[Entry]]) -> Result<(), Violation> {
        let Some(committed) = self.committed.get(&group) else { return Ok(()) };
        let majority = disks.len() / 2 + 1;
        for (&index, entry) in committed {
            let holders = disks
                .iter()
                .filter(|log| log.get(index as usize - 1).is_some_and(|held| held.term == entry.term))
                .count();
            if holders < majority {
                return Err(format!(
                    "durability (§5.3, §5.4): group {group} committed entry {index} is on {holders} disks, \
                     fewer than a majority of {majority}"
                ));
            }
        }
        Ok(())
    }

    /// Whether every node in `nodes` applied `index` of `group` since its last boot.
    pub fn applied_everywhere(&self, group: GroupId, index: u64, nodes: &[NodeId]) -> bool {
        nodes.iter().all(|node| self.applied.get(&(*node, group)).is_some_and(|last| *last >= index))
    }

    pub fn committed_count(&self) -> usize {
        self.committed.values().map(BTreeMap::len).sum()
    }

    pub fn elections(&self) -> usize {
        self.leaders.len()
    }
}

/// Log Matching (§5.3): if two logs contain an entry with the same index and term, the
/// logs are identical in all entries up through that index.
pub fn log_matching(group: GroupId, a: (NodeId, &[Entry]), b: (NodeId, &[Entry])) -> Result<(), Violation> {
    let common = a.1.len().min(b.1.len());
    let Some(last_same) = (0..common).rev().find(|&i| a.1[i].term == b.1[i].term) else { return Ok(()) };
    for i in 0..=last_same {
        let (x, y) = (&a.1[i], &b.1[i]);
        if x.index != y.index || x.term != y.term || x.data != y.data || x.entry_type != y.entry_type {
            return Err(format!(
                "Log Matching (§5.3): group {group} nodes {} and {} agree at index {} (term {}) but differ at \
                 index {} (terms {} and {})",
                a.0,
                b.0,
                last_same + 1,
                a.1[last_same].term,
                i + 1,
                x.term,
                y.term
            ));
        }
    }
    Ok(())
}
