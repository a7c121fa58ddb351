use super::*;
use crate::offset_translator::BATCH_HEADER_BYTES;
use crate::Envelope;
use raft::eraftpb::{ConfChangeSingle, ConfChangeType};

const GROUP: GroupId = GroupId { topic: 1, partition: 0 };

fn batch(offset_count: i32) -> Bytes {
    let mut bytes = vec![0u8; BATCH_HEADER_BYTES];
    bytes[16] = 2;
    bytes[23..27].copy_from_slice(&(offset_count - 1).to_be_bytes());
    Bytes::from(bytes)
}

fn cluster(nodes: u64, groups: &[GroupId]) -> Vec<MultiRaft> {
    (1..=nodes)
        .map(|id| {
            let mut raft = MultiRaft::new(Config::new(id, id));
            for &group in groups {
                let voters = (1..=nodes).collect();
                raft.create_group(group, GroupStorage::new(voters), 0).expect("new group");
            }
            raft
        })
        .collect()
}

/// Collects from every node, persists at once and delivers everything, until quiet.
fn settle(nodes: &mut [MultiRaft]) {
    settle_installing(nodes);
}

/// As `settle`; returns the snapshots each node (by index) was asked to install.
fn settle_installing(nodes: &mut [MultiRaft]) -> Vec<(usize, SnapshotInstall)> {
    settle_cut(nodes, None).installs
}

/// What `settle_cut` saw: the snapshots each node (by index) was asked to install,
/// and the reads confirmed, by node.
struct Settled {
    installs: Vec<(usize, SnapshotInstall)>,
    reads: Vec<(NodeId, ReadConfirmed)>,
}

/// As `settle`, delivering nothing to or from node index `cut`.
fn settle_cut(nodes: &mut [MultiRaft], cut: Option<usize>) -> Settled {
    let mut settled = Settled { installs: Vec::new(), reads: Vec::new() };
    for _ in 0..100 {
        let mut quiet = true;
        let mut inbox = Vec::new();
        for (i, raft) in nodes.iter_mut().enumerate() {
            let actions = raft.collect();
            quiet &= actions.is_empty();
            for request in &actions.persist {
                if let Some(install) = &request.snapshot {
                    settled.installs.push((raft.node() as usize - 1, install.clone()));
                }
                raft.persisted(request.group, request.ready).expect("known group");
                if let Some(install) = &request.snapshot {
                    raft.applied(request.group, install.index).expect("known group");
                }
            }
            settled.reads.extend(actions.reads.iter().map(|read| (raft.node(), *read)));
            if Some(i) != cut {
                for (_, envelopes) in actions.messages.into_iter().chain(actions.heartbeats) {
                    inbox.extend(envelopes.into_iter().filter(|e| Some(e.message.to as usize - 1) != cut));
                }
            }
            for apply in &actions.apply {
                let last = apply.entries.last().map_or(0, |entry| entry.index);
                raft.applied(apply.group, last).expect("known group");
            }
        }
        for envelope in inbox {
            let to = envelope.message.to as usize - 1;
            let _ = nodes[to].step(envelope.group, envelope.message);
        }
        if quiet {
            return settled;
        }
    }
    panic!("cluster never settled");
}

#[test]
fn a_leader_commits_only_after_its_own_write() {
    let mut nodes = cluster(1, &[GROUP]);
    let raft = &mut nodes[0];
    raft.campaign(GROUP).expect("campaign");
    let election = raft.collect();
    assert_eq!(election.leadership[0].role, StateRole::Leader);
    for request in &election.persist {
        raft.persisted(request.group, request.ready).expect("known group");
    }
    raft.collect();
    let committed = raft.commit_index(GROUP);
    let proposed = raft.propose(GROUP, batch(3)).expect("leader accepts");
    let actions = raft.collect();
    assert_eq!(actions.persist.len(), 1);
    assert_eq!(actions.persist[0].entries.last().map(|entry| entry.index), Some(proposed.index));
    assert_eq!(raft.commit_index(GROUP), committed, "no commit before the leader's own write");
    raft.persisted(GROUP, actions.persist[0].ready).expect("known group");
    let applied = raft.collect();
    assert_eq!(raft.commit_index(GROUP), Some(proposed.index));
    let entries = &applied.apply[0].entries;
    assert_eq!(entries.last().map(|entry| entry.index), Some(proposed.index));
}

#[test]
fn followers_name_the_leader_instead_of_forwarding() {
    let mut nodes = cluster(3, &[GROUP]);
    nodes[0].campaign(GROUP).expect("campaign");
    settle(&mut nodes);
    assert_eq!(nodes[0].leader_term(GROUP), Some(1), "pre-vote does not bump the term");
    match nodes[1].propose(GROUP, batch(1)) {
        Err(ProposeError::NotLeader { leader: Some(1), term: 1, .. }) => {}
        other => panic!("expected NotLeader naming node 1, got {other:?}"),
    }
    let first = nodes[0].propose(GROUP, batch(4)).expect("leader accepts");
    let second = nodes[0].propose(GROUP, batch(2)).expect("leader accepts");
    // Index 1 is the leader's empty entry, which takes no Kafka offset.
    assert_eq!((first.index, first.base_offset), (2, 0));
    assert_eq!((second.index, second.base_offset), (3, 4));
    settle(&mut nodes);
    for raft in &nodes {
        assert_eq!(raft.commit_index(GROUP), Some(3));
        let translator = raft.storage(GROUP).expect("group").translator();
        assert_eq!(translator.offsets_of(3), Some(4..6));
    }
    let invalid = nodes[0].propose(GROUP, Bytes::from_static(b"short"));
    assert!(matches!(invalid, Err(ProposeError::InvalidBatch { .. })));
}

/// Ticks every node once and delivers what that sends; returns node 1's envelopes.
fn tick_all(nodes: &mut [MultiRaft]) -> Vec<Envelope> {
    let mut sent_by_first = Vec::new();
    let mut inbox = Vec::new();
    for (i, raft) in nodes.iter_mut().enumerate() {
        raft.tick();
        let actions = raft.collect();
        for (_, envelopes) in actions.messages.into_iter().chain(actions.heartbeats) {
            if i == 0 {
                sent_by_first.extend(envelopes.iter().cloned());
            }
            inbox.extend(envelopes);
        }
    }
    for envelope in inbox {
        let to = envelope.message.to as usize - 1;
        let _ = nodes[to].step(envelope.group, envelope.message);
    }
    settle(nodes);
    sent_by_first
}

#[test]
fn idle_groups_go_quiet_and_only_pings_remain() {
    let groups = [GROUP, GroupId { topic: 1, partition: 1 }, GroupId { topic: 2, partition: 0 }];
    let mut nodes = cluster(3, &groups);
    for group in groups {
        nodes[0].campaign(group).expect("campaign");
    }
    settle(&mut nodes);
    // Nothing in flight: each leader says so once, in one frame per follower node.
    nodes[0].tick();
    let actions = nodes[0].collect();
    assert!(actions.messages.is_empty(), "{:?}", actions.messages);
    assert_eq!(actions.heartbeats.keys().copied().collect::<Vec<_>>(), vec![2, 3]);
    for envelopes in actions.heartbeats.values() {
        let seen: Vec<GroupId> = envelopes.iter().map(|envelope| envelope.group).collect();
        assert_eq!(seen, groups.to_vec());
        assert!(envelopes.iter().all(|envelope| quiesce::is_quiesce(&envelope.message)));
    }
    for (_, envelopes) in actions.heartbeats {
        for envelope in envelopes {
            let to = envelope.message.to as usize - 1;
            nodes[to].step(envelope.group, envelope.message).expect("quiesce heartbeat");
        }
    }
    settle(&mut nodes);
    assert!(nodes.iter().all(|raft| raft.quiet_groups() == groups.len()), "every replica is quiet");
    // Ten election timeouts later: no election, and only one ping per peer per
    // heartbeat interval crossed the network, whatever the number of groups.
    let ticks = 10 * nodes[0].config.election_ticks;
    let sent: Vec<Envelope> = (0..ticks).flat_map(|_| tick_all(&mut nodes)).collect();
    assert!(sent.iter().all(|envelope| envelope.group == PING_GROUP), "{sent:?}");
    assert_eq!(sent.len(), 2 * ticks / nodes[0].config.heartbeat_ticks);
    assert_eq!(nodes[0].leader_term(GROUP), Some(1));
    // Quiet is not silent: every voter stays in sync, before and after a wake.
    let all_in_sync = Some(InSync { voters: vec![1, 2, 3], offline: Vec::new() });
    assert_eq!(nodes[0].in_sync(GROUP), all_in_sync);
    // A proposal wakes its group, and only it.
    nodes[0].propose(GROUP, batch(1)).expect("leader accepts");
    assert_eq!(nodes[0].in_sync(GROUP), all_in_sync);
    settle(&mut nodes);
    nodes[0].tick();
    assert_eq!(nodes[0].in_sync(GROUP), all_in_sync);
    settle(&mut nodes);
    assert_eq!(nodes[0].quiet_groups(), groups.len() - 1);
    assert_eq!(nodes[1].commit_index(GROUP), nodes[0].commit_index(GROUP));
}

/// A 3-node cluster whose group node 1 leads, every node quiet.
fn quiet_cluster_led_by_node_1() -> Vec<MultiRaft> {
    let mut nodes = cluster(3, &[GROUP]);
    nodes[0].campaign(GROUP).expect("campaign");
    settle(&mut nodes);
    for _ in 0..3 {
        tick_all(&mut nodes);
    }
    assert!(nodes.iter().all(|raft| raft.quiet_groups() == 1));
    nodes
}

/// Node 1 has stopped: ticks nodes 2 and 3, dropping what is sent to node 1, until one
/// of them leads. Returns the ticks it took.
fn ticks_until_another_leads(nodes: &mut [MultiRaft]) -> usize {
    let election_ticks = nodes[1].config.election_ticks;
    let mut waited = 0;
    while !nodes[1..].iter().any(|raft| raft.leader_term(GROUP).is_some()) {
        for _ in 0..10 {
            let mut inbox = Vec::new();
            for raft in nodes[1..].iter_mut() {
                let actions = raft.collect();
                for request in &actions.persist {
                    raft.persisted(request.group, request.ready).expect("known group");
                }
                for (_, envelopes) in actions.messages.into_iter().chain(actions.heartbeats) {
                    inbox.extend(envelopes.into_iter().filter(|envelope| envelope.message.to != 1));
                }
            }
            for envelope in inbox {
                let to = envelope.message.to as usize - 1;
                let _ = nodes[to].step(envelope.group, envelope.message);
            }
        }
        for raft in nodes[1..].iter_mut() {
            raft.tick();
        }
        waited += 1;
        assert!(waited <= election_ticks + election_ticks / 2 + 3, "no new leader after {waited} ticks");
    }
    waited
}

#[test]
fn followers_of_a_silent_leader_elect_another_soon() {
    let mut nodes = quiet_cluster_led_by_node_1();
    // Node 1 stops: the others hear nothing from it, and after an election timeout
    // (plus at most half of one) one of them leads.
    let waited = ticks_until_another_leads(&mut nodes);
    assert!(
        waited > nodes[1].config.election_ticks,
        "peers are given an election timeout: elected after {waited} ticks"
    );
}

#[test]
fn followers_that_saw_the_leaders_connection_close_elect_another_at_once() {
    let mut nodes = quiet_cluster_led_by_node_1();
    // Node 1 is killed: both followers' transports see its connection close.
    nodes[1].peer_lost(1);
    nodes[2].peer_lost(1);
    let waited = ticks_until_another_leads(&mut nodes);
    assert!(waited <= 2, "elected after {waited} ticks, not within 2");
}

#[test]
fn a_closed_connection_alone_does_not_unseat_a_live_leader() {
    let mut nodes = quiet_cluster_led_by_node_1();
    // Only node 2 saw a connection from node 1 close (node 1 reconnects): node 2
    // campaigns, node 3, still in node 1's lease, refuses, and node 1 keeps leading.
    nodes[1].peer_lost(1);
    let term = nodes[0].leader_term(GROUP).expect("node 1 leads");
    for _ in 0..3 * nodes[0].config.election_ticks {
        tick_all(&mut nodes);
        settle(&mut nodes);
    }
    assert_eq!(nodes[0].leader_term(GROUP), Some(term));
}

#[test]
fn only_a_leader_a_majority_still_follows_confirms_a_read() {
    let mut nodes = cluster(3, &[GROUP]);
    nodes[0].campaign(GROUP).expect("campaign");
    settle(&mut nodes);
    for _ in 0..3 {
        tick_all(&mut nodes);
    }
    assert_eq!(nodes[0].quiet_groups(), 1);
    // A quiet leader confirms too (the read wakes the group).
    nodes[0].read_index(GROUP, 7).expect("the leader takes a read");
    let commit = nodes[0].commit_index(GROUP).expect("group");
    assert_eq!(settle_cut(&mut nodes, None).reads, vec![(1, ReadConfirmed { group: GROUP, round: 7, commit })]);
    assert!(matches!(nodes[1].read_index(GROUP, 8), Err(ProposeError::NotLeader { leader: Some(1), .. })));

    // Node 1 is cut off long enough for the others to elect a leader, and does not
    // know it: its read goes out, is answered in a later term, and never confirms.
    let mut ticks = 0;
    while !nodes[1..].iter().any(|raft| raft.leader_term(GROUP).is_some()) {
        for raft in nodes[1..].iter_mut() {
            raft.tick();
        }
        settle_cut(&mut nodes, Some(0));
        ticks += 1;
        assert!(ticks < 100, "no new leader");
    }
    assert!(nodes[0].leader_term(GROUP).is_some(), "the cut-off leader still believes it leads");
    nodes[0].read_index(GROUP, 9).expect("it takes the read");
    let reads = settle_cut(&mut nodes, None).reads;
    assert!(reads.iter().all(|(node, _)| *node != 1), "a deposed leader confirmed a read: {reads:?}");
    assert_eq!(nodes[0].leader_term(GROUP), None, "the answers in a later term depose it");
}

fn change(changes: &[(ConfChangeType, NodeId)]) -> ConfChangeV2 {
    let changes = changes
        .iter()
        .map(|&(change_type, node_id)| ConfChangeSingle { change_type, node_id, ..Default::default() })
        .collect();
    ConfChangeV2 { changes, ..Default::default() }
}

#[test]
fn a_new_member_starts_from_a_snapshot_and_replaces_a_voter() {
    let mut nodes = cluster(3, &[GROUP]);
    let mut fourth = MultiRaft::new(Config::new(4, 4));
    fourth.create_group(GROUP, GroupStorage::new(Vec::new()), 0).expect("new group");
    nodes.push(fourth);
    nodes[0].campaign(GROUP).expect("campaign");
    settle(&mut nodes);
    for _ in 0..5 {
        nodes[0].propose(GROUP, batch(2)).expect("leader accepts");
    }
    settle(&mut nodes);
    let everyone_has = nodes[0].compact(GROUP, 0).expect("group");
    for raft in &mut nodes[1..3] {
        raft.compact(GROUP, everyone_has).expect("group");
    }
    assert!(nodes[0].storage(GROUP).expect("group").base().index > 1, "entries below the snapshot point");
    // A learner first: the log it needs is below the snapshot point, so it gets a
    // snapshot naming it, at the leader's applied index, with the Kafka offset there.
    let added = nodes[0].propose_conf_change(GROUP, change(&[(ConfChangeType::AddLearnerNode, 4)])).expect("leader");
    let installs = settle_installing(&mut nodes);
    assert_eq!(installs.len(), 1, "{installs:?}");
    let (to, install) = &installs[0];
    assert_eq!(*to, 3);
    assert!(install.index >= added && install.conf_index == added, "{install:?}");
    assert_eq!(install.offset, 10);
    assert_eq!(install.conf_state.learners, vec![4]);
    assert_eq!(nodes[3].commit_index(GROUP), nodes[0].commit_index(GROUP));
    // Then one joint change makes it a voter in place of node 3, left at once.
    let joint = change(&[(ConfChangeType::AddNode, 4), (ConfChangeType::RemoveNode, 3)]);
    nodes[0].propose_conf_change(GROUP, joint).expect("leader");
    settle(&mut nodes);
    settle(&mut nodes);
    // raft-rs appends the leave entry when the joint one applies; it goes out with
    // the next heartbeat's answer.
    for _ in 0..4 {
        tick_all(&mut nodes);
    }
    let (conf, pending) = nodes[0].conf(GROUP).expect("group");
    assert!(!pending);
    let sorted = |mut ids: Vec<NodeId>| {
        ids.sort_unstable();
        ids
    };
    assert_eq!(sorted(conf.voters), vec![1, 2, 4]);
    assert!(conf.voters_outgoing.is_empty() && conf.learners.is_empty());
    assert_eq!(nodes[3].conf(GROUP).map(|(c, _)| sorted(c.voters)), Some(vec![1, 2, 4]));
    let proposed = nodes[0].propose(GROUP, batch(3)).expect("leader accepts");
    assert_eq!(proposed.base_offset, 10);
    settle(&mut nodes);
    assert_eq!(nodes[3].commit_index(GROUP), Some(proposed.index));
    let translator = nodes[3].storage(GROUP).expect("group").translator();
    assert_eq!(translator.offsets_of(proposed.index), Some(10..13));
}

#[test]
fn messages_from_the_network_are_checked() {
    let mut nodes = cluster(3, &[GROUP]);
    let raft = &mut nodes[0];
    let mut message = Message::default();
    message.set_msg_type(MessageType::MsgHeartbeat);
    message.to = 2;
    assert!(matches!(raft.step(GROUP, message.clone()), Err(StepError::WrongDestination { to: 2, node: 1 })));
    message.to = 1;
    let unknown = GroupId { topic: 9, partition: 9 };
    assert!(matches!(raft.step(unknown, message.clone()), Err(StepError::UnknownGroup { .. })));
    message.set_msg_type(MessageType::MsgPropose);
    assert!(matches!(raft.step(GROUP, message.clone()), Err(StepError::Refused { .. })));
    message.set_msg_type(MessageType::MsgHup);
    assert!(matches!(raft.step(GROUP, message), Err(StepError::Raft { .. })));
    assert!(matches!(MultiRaft::decode_message(&[0xff, 0xff, 0xff]), Err(StepError::Decode(_))));
    let mut valid = Message::default();
    valid.set_msg_type(MessageType::MsgAppend);
    valid.to = 1;
    let bytes = valid.write_to_bytes().expect("encodes");
    assert_eq!(MultiRaft::decode_message(&bytes).ok(), Some(valid));
}

#[test]
fn one_seed_gives_one_election_schedule() {
    let timeouts = |seed| {
        let mut raft = MultiRaft::new(Config::new(1, seed));
        raft.create_group(GROUP, GroupStorage::new(vec![1, 2, 3]), 0).expect("new group");
        let group = raft.groups.get(&GROUP).expect("group");
        group.node.raft.randomized_election_timeout()
    };
    assert_eq!(timeouts(42), timeouts(42));
    let spread: BTreeSet<usize> = (0..50).map(timeouts).collect();
    assert!(spread.len() > 1 && spread.iter().all(|t| (10..20).contains(t)), "{spread:?}");
}
