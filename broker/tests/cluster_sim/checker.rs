//! What the cluster simulation checks, from what it sees of the nodes: Raft's election
//! safety (one leader per group and term) and state-machine safety (no two nodes hold
//! different batches below their high watermarks, and a high watermark never covers a
//! hole), and the ledger's rule (every acknowledged batch is committed, at the offset
//! it was acknowledged at, with the value it was sent with).

use std::collections::BTreeMap;
use std::fmt;

use keel_raft::{GroupId, NodeId};

#[derive(Debug)]
pub struct Violation(pub String);

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A batch a client was told is written: `value` at `offset` of `group`.
#[derive(Debug, Clone)]
pub struct Acked {
    pub group: GroupId,
    pub offset: i64,
    pub value: Vec<u8>,
}

#[derive(Default)]
pub struct Checker {
    /// The node that led each (group, term).
    leaders: BTreeMap<(GroupId, i32), NodeId>,
    /// Each group's committed batches as the nodes have shown them: offset to value.
    committed: BTreeMap<GroupId, BTreeMap<i64, Vec<u8>>>,
}

impl Checker {
    /// `node` says it leads `group` in `term`; true if that is news.
    pub fn leader(&mut self, group: GroupId, term: i32, node: NodeId) -> Result<bool, Violation> {
        match self.leaders.insert((group, term), node) {
            Some(other) if other != node => {
                Err(Violation(format!("group {group}: nodes {other} and {node} both led term {term}")))
            }
            before => Ok(before.is_none()),
        }
    }

    /// Distinct (group, term) leaderships seen.
    pub fn leaderships(&self) -> usize {
        self.leaders.len()
    }

    /// What `node` holds of `group` below its high watermark `hw`, from its log start
    /// `start`: (offset, value) of each batch, in order. It must cover every offset
    /// from `start` to `hw` (batches of one record each) and agree with what any node
    /// showed before.
    pub fn below_high_watermark(
        &mut self,
        node: NodeId,
        group: GroupId,
        start: i64,
        hw: i64,
        batches: &[(i64, Vec<u8>)],
    ) -> Result<(), Violation> {
        let offsets: Vec<i64> = batches.iter().map(|(o, _)| *o).collect();
        if offsets != (start..hw).collect::<Vec<_>>() {
            let held = match (offsets.first(), offsets.last()) {
                (Some(first), Some(last)) => format!("{} batches from {first} to {last}", offsets.len()),
                _ => "nothing".to_string(),
            };
            return Err(Violation(format!(
                "node {node} group {group}: high watermark {hw} (log start {start}) over {held}"
            )));
        }
        let committed = self.committed.entry(group).or_default();
        for (offset, value) in batches {
            match committed.get(offset) {
                Some(known) if known != value => {
                    return Err(Violation(format!(
                        "node {node} group {group}: offset {offset} below the high watermark holds {}, another node \
                         committed {} there",
                        show(value),
                        show(known)
                    )));
                }
                Some(_) => {}
                None => {
                    committed.insert(*offset, value.clone());
                }
            }
        }
        Ok(())
    }

    /// Every acknowledged batch is committed where it was acknowledged.
    pub fn acknowledged(&self, acked: &[Acked]) -> Result<(), Violation> {
        for a in acked {
            let found = self.committed.get(&a.group).and_then(|c| c.get(&a.offset));
            if found != Some(&a.value) {
                return Err(Violation(format!(
                    "group {}: {} acknowledged at offset {}, committed there: {}",
                    a.group,
                    show(&a.value),
                    a.offset,
                    found.map_or("nothing".to_string(), |v| show(v))
                )));
            }
        }
        Ok(())
    }

    pub fn committed_batches(&self) -> usize {
        self.committed.values().map(BTreeMap::len).sum()
    }
}

/// A value by its name (the part before the padding).
pub fn show(value: &[u8]) -> String {
    let name = value.split(|b| *b == b'.').next().unwrap_or_default();
    format!("{:?} ({} bytes)", String::from_utf8_lossy(name), value.len())
}
