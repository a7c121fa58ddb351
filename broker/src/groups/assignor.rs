//! Server-side assignors of KIP-848 consumer groups: `uniform` (balanced and sticky,
//! the default) and `range` (contiguous ranges per topic, as the classic RangeAssignor).
//!
//! The uniform assignor keeps every partition a member still subscribes to, hands out
//! the unowned ones to the least loaded eligible member, then moves partitions from
//! the most to the least loaded eligible members until no move narrows the spread.
//! Each move lowers the sum of squared member loads, so the loop ends; with identical
//! subscriptions it ends balanced to within one partition while moving as few
//! partitions as possible, which is what keeps a 3 → 4 rebalance cheap.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

/// Partitions by topic id.
pub type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

pub const UNIFORM: &str = "uniform";
pub const RANGE: &str = "range";
pub const ASSIGNORS: &[&str] = &[UNIFORM, RANGE];

/// A member as an assignor sees it.
pub struct MemberSpec<'a> {
    pub id: &'a str,
    pub topics: &'a BTreeSet<Uuid>,
    /// Its previous target assignment, for stickiness.
    pub current: &'a Assignment,
}

/// Assigns every partition of `topics` (id → partition count) that some member
/// subscribes to. Unknown assignor names fall back to uniform (callers validate).
pub fn assign(name: &str, members: &[MemberSpec], topics: &BTreeMap<Uuid, i32>) -> BTreeMap<String, Assignment> {
    if name == RANGE {
        range(members, topics)
    } else {
        uniform(members, topics)
    }
}

fn uniform(members: &[MemberSpec], topics: &BTreeMap<Uuid, i32>) -> BTreeMap<String, Assignment> {
    let mut owned: Vec<Vec<(Uuid, i32)>> = vec![Vec::new(); members.len()];
    let mut taken: BTreeSet<(Uuid, i32)> = BTreeSet::new();
    // 1. Stickiness: keep what is still subscribed and still exists.
    for (i, m) in members.iter().enumerate() {
        for (topic, parts) in m.current {
            let Some(&count) = topics.get(topic) else {
                continue;
            };
            if !m.topics.contains(topic) {
                continue;
            }
            for &p in parts {
                if p < count && taken.insert((*topic, p)) {
                    owned[i].push((*topic, p));
                }
            }
        }
    }
    // 2. Unowned partitions go to the least loaded eligible member.
    for (topic, &count) in topics {
        for p in 0..count {
            if taken.contains(&(*topic, p)) {
                continue;
            }
            let eligible = (0..members.len()).filter(|&i| members[i].topics.contains(topic));
            if let Some(i) = eligible.min_by_key(|&i| (owned[i].len(), i)) {
                owned[i].push((*topic, p));
                taken.insert((*topic, p));
            }
        }
    }
    // 3. Balance: one move at a time, always from the most loaded member that has a
    //    partition some lighter eligible member can take.
    while let Some((from, k, to)) = best_move(members, &owned) {
        let moved = owned[from].swap_remove(k);
        owned[to].push(moved);
    }
    collect(members, owned)
}

/// (from member, index in its list, to member) of the move from the heaviest member
/// to the lightest eligible one that still narrows the spread.
fn best_move(members: &[MemberSpec], owned: &[Vec<(Uuid, i32)>]) -> Option<(usize, usize, usize)> {
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(owned[i].len()), i));
    for from in order {
        for k in (0..owned[from].len()).rev() {
            let topic = owned[from][k].0;
            let to = (0..members.len())
                .filter(|&j| j != from && members[j].topics.contains(&topic) && owned[j].len() + 1 < owned[from].len())
                .min_by_key(|&j| (owned[j].len(), j));
            if let Some(to) = to {
                return Some((from, k, to));
            }
        }
    }
    None
}

fn range(members: &[MemberSpec], topics: &BTreeMap<Uuid, i32>) -> BTreeMap<String, Assignment> {
    let mut owned: Vec<Vec<(Uuid, i32)>> = vec![Vec::new(); members.len()];
    for (topic, &count) in topics {
        let mut subscribers: Vec<usize> = (0..members.len()).filter(|&i| members[i].topics.contains(topic)).collect();
        if subscribers.is_empty() {
            continue;
        }
        subscribers.sort_by_key(|&i| members[i].id);
        let n = subscribers.len() as i32;
        let (per, extra) = (count / n, count % n);
        let mut next = 0;
        for (k, &i) in subscribers.iter().enumerate() {
            let take = per + if (k as i32) < extra { 1 } else { 0 };
            owned[i].extend((next..next + take).map(|p| (*topic, p)));
            next += take;
        }
    }
    collect(members, owned)
}

fn collect(members: &[MemberSpec], owned: Vec<Vec<(Uuid, i32)>>) -> BTreeMap<String, Assignment> {
    members
        .iter()
        .zip(owned)
        .map(|(m, parts)| {
            let mut a = Assignment::new();
            for (t, p) in parts {
                a.entry(t).or_default().insert(p);
            }
            (m.id.to_string(), a)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(a: &Assignment) -> usize {
        a.values().map(|s| s.len()).sum()
    }

    #[test]
    fn uniform_three_to_four_moves_only_what_it_must() {
        let t = Uuid::new_v4();
        let topics = BTreeMap::from([(t, 12)]);
        let subs = BTreeSet::from([t]);
        let empty = Assignment::new();
        let ids = ["a", "b", "c"];
        let specs: Vec<MemberSpec> = ids.iter().map(|id| MemberSpec { id, topics: &subs, current: &empty }).collect();
        let three = assign(UNIFORM, &specs, &topics);
        assert!(three.values().all(|a| count(a) == 4));
        let mut specs: Vec<MemberSpec> =
            ids.iter().map(|id| MemberSpec { id, topics: &subs, current: &three[*id] }).collect();
        specs.push(MemberSpec { id: "d", topics: &subs, current: &empty });
        let four = assign(UNIFORM, &specs, &topics);
        assert!(four.values().all(|a| count(a) == 3), "{four:?}");
        for id in ids {
            assert!(four[id][&t].is_subset(&three[id][&t]), "{id} only gives partitions away");
        }
        let all: BTreeSet<i32> = four.values().flat_map(|a| a[&t].iter().copied()).collect();
        assert_eq!(all.len(), 12);
    }

    #[test]
    fn uniform_respects_heterogeneous_subscriptions() {
        let (t1, t2) = (Uuid::new_v4(), Uuid::new_v4());
        let topics = BTreeMap::from([(t1, 4), (t2, 2)]);
        let (s1, s12) = (BTreeSet::from([t1]), BTreeSet::from([t1, t2]));
        let empty = Assignment::new();
        let specs = [
            MemberSpec { id: "a", topics: &s1, current: &empty },
            MemberSpec { id: "b", topics: &s12, current: &empty },
        ];
        let out = assign(UNIFORM, &specs, &topics);
        assert!(!out["a"].contains_key(&t2));
        assert_eq!(count(&out["a"]) + count(&out["b"]), 6);
        assert_eq!((count(&out["a"]), count(&out["b"])), (3, 3));
    }

    #[test]
    fn range_gives_contiguous_ranges_by_member_id() {
        let t = Uuid::new_v4();
        let topics = BTreeMap::from([(t, 5)]);
        let subs = BTreeSet::from([t]);
        let empty = Assignment::new();
        let specs = [
            MemberSpec { id: "b", topics: &subs, current: &empty },
            MemberSpec { id: "a", topics: &subs, current: &empty },
        ];
        let out = assign(RANGE, &specs, &topics);
        assert_eq!(out["a"][&t], BTreeSet::from([0, 1, 2]));
        assert_eq!(out["b"][&t], BTreeSet::from([3, 4]));
    }
}
