//! Work spread over the shards that own it: items grouped by owner shard, one call
//! per owner, the answers put back in the items' order.

use std::rc::Rc;

use super::dispatch::Serve;
use super::Shard;

/// Groups items by owner shard, sends each owner the request `request` makes of its
/// items, and returns the outputs (an owner's reply holds one per item) in the items'
/// original order.
pub async fn scatter<I, O, R>(shard: &Rc<Shard>, items: Vec<(usize, I)>, request: impl Fn(Vec<I>) -> R) -> Vec<O>
where
    R: Serve<Reply = Vec<O>>,
{
    let n = items.len();
    let mut per_shard: Vec<(Vec<usize>, Vec<I>)> = (0..shard.count).map(|_| (Vec::new(), Vec::new())).collect();
    for (i, (owner, item)) in items.into_iter().enumerate() {
        per_shard[owner].0.push(i);
        per_shard[owner].1.push(item);
    }
    let mut calls = Vec::new();
    let mut positions = Vec::new();
    for (owner, (pos, batch)) in per_shard.into_iter().enumerate() {
        if batch.is_empty() {
            continue;
        }
        positions.push(pos);
        calls.push(shard.call(owner, request(batch)));
    }
    let results = keel_storage::join::join_all(calls).await;
    let mut out: Vec<Option<O>> = (0..n).map(|_| None).collect();
    for (pos, outputs) in positions.into_iter().zip(results) {
        assert_eq!(pos.len(), outputs.len(), "an owner shard answers every item it was sent");
        for (i, o) in pos.into_iter().zip(outputs) {
            out[i] = Some(o);
        }
    }
    out.into_iter().map(|o| o.expect("every item answered")).collect()
}

/// Answers every partition a request names, in request order. `items` holds, per
/// partition, either what its owner needs to answer it or an answer already known
/// (a refusal decided up front). Partitions that exist are sent to their owner shards,
/// one call per owner with the request `request` makes of its partitions (which
/// answers them, usually with [`answer_each`]); the others get `unknown`.
pub async fn answer_partitions<I, O, R>(
    shard: &Rc<Shard>,
    items: Vec<Result<(String, i32, I), O>>,
    unknown: O,
    request: impl Fn(Vec<(String, i32, I)>) -> R,
) -> Vec<O>
where
    O: Clone,
    R: Serve<Reply = Vec<O>>,
{
    let meta = shard.meta();
    let mut out: Vec<Option<O>> = Vec::with_capacity(items.len());
    let mut work = Vec::new();
    let mut slots = Vec::new();
    for item in items {
        match item {
            Err(known) => out.push(Some(known)),
            Ok((topic, partition, input)) => match meta.owner(&topic, partition) {
                Some(owner) => {
                    slots.push(out.len());
                    work.push((owner, (topic, partition, input)));
                    out.push(None);
                }
                None => out.push(Some(unknown.clone())),
            },
        }
    }
    let found = scatter(shard, work, request).await;
    for (slot, o) in slots.into_iter().zip(found) {
        out[slot] = Some(o);
    }
    out.into_iter().map(|o| o.expect("every partition answered")).collect()
}

/// On an owner shard: answers its partitions of an [`answer_partitions`] with `answer`,
/// one after another.
pub async fn answer_each<I, O, Fut>(
    shard: &Rc<Shard>,
    items: Vec<(String, i32, I)>,
    answer: impl Fn(Rc<Shard>, String, i32, I) -> Fut,
) -> Vec<O>
where
    Fut: std::future::Future<Output = O>,
{
    let mut answers = Vec::with_capacity(items.len());
    for (topic, partition, input) in items {
        answers.push(answer(shard.clone(), topic, partition, input).await);
    }
    answers
}
