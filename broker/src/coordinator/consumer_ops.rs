//! KIP-848 operations on the coordinator shard: ConsumerGroupHeartbeat and
//! ConsumerGroupDescribe.

use std::rc::Rc;

use uuid::Uuid;

use super::shell;
use crate::cluster::routing;
use crate::errors;
use crate::groups::consumer::{
    ConsumerGroup, DescribedConsumerGroup, HeartbeatRequest, HeartbeatResponse, Settings, TopicLookup,
};
use crate::groups::membership;
use crate::groups::Group;
use crate::metadata::Metadata;
use crate::security::acl;
use crate::shard::partition::now_ms;
use crate::shard::Shard;

pub type Failure = (i16, String);

fn settings(shard: &Shard) -> Settings {
    Settings {
        session_timeout_ms: shard.config.group_consumer_session_timeout_ms,
        heartbeat_interval_ms: shard.config.group_consumer_heartbeat_interval_ms,
    }
}

/// The topics as a member's heartbeat sees them: its group's regexes match only the
/// topics the member's principal may DESCRIBE (`requester`, `None` when it may describe
/// every one), as Kafka resolves a group's regexes with the context of the member whose
/// heartbeat asked for it.
struct Visible<'a> {
    meta: &'a Metadata,
    shard: &'a Shard,
    requester: Option<&'a (String, String)>,
}

impl TopicLookup for Visible<'_> {
    fn topic_by_name(&self, name: &str) -> Option<(Uuid, i32)> {
        self.meta.topic_by_name(name)
    }
    fn topic_name(&self, id: &Uuid) -> Option<String> {
        TopicLookup::topic_name(self.meta, id)
    }
    fn topic_names(&self) -> Vec<String> {
        let authorizer = &self.shard.security.authorizer;
        let visible = |name: &String| {
            self.requester.is_none_or(|r| {
                authorizer.allows_requester(self.meta, r, acl::operation::DESCRIBE, acl::resource::TOPIC, name)
            })
        };
        self.meta.topics.keys().filter(|n| visible(n)).cloned().collect()
    }
    fn version(&self) -> u64 {
        self.meta.version
    }
}

/// One ConsumerGroupHeartbeat; `requester` names the member's principal for the
/// regexes (see [`Visible`]).
pub async fn heartbeat(
    shard: Rc<Shard>,
    partition: i32,
    group_id: String,
    req: HeartbeatRequest,
    requester: Option<(String, String)>,
) -> Result<HeartbeatResponse, Failure> {
    routing::check_coordinator(&shard, partition).map_err(|code| (code, String::new()))?;
    let now = now_ms();
    let meta = shard.meta();
    let (response, epoch) = {
        let mut c = shard.coordinator.borrow_mut();
        let c = &mut *c;
        let joining = req.member_epoch == 0;
        let replace = match c.groups.get(&group_id) {
            None if joining => true,
            None => {
                return Err((errors::UNKNOWN_MEMBER_ID, format!("Group {group_id} not found.")));
            }
            // An empty classic group (e.g. one that only committed offsets) is upgraded.
            Some(Group::Classic(g)) if g.member_count() == 0 && joining => true,
            Some(Group::Classic(_)) => {
                return Err((
                    errors::GROUP_ID_NOT_FOUND,
                    format!("Group {group_id} is not a consumer group: it has classic protocol members."),
                ))
            }
            Some(Group::Consumer(_)) => false,
        };
        if replace {
            let epoch = match c.groups.get(&group_id) {
                Some(Group::Classic(g)) => g.generation(),
                _ => 0,
            };
            c.groups.insert(group_id.clone(), Group::Consumer(ConsumerGroup::with_epoch(&group_id, epoch, now)));
        }
        let Some(Group::Consumer(g)) = c.groups.get_mut(&group_id) else {
            unreachable!("a consumer group was just ensured")
        };
        let topics = Visible { meta: &meta, shard: &shard, requester: requester.as_ref() };
        let outcome = g.heartbeat(req, &topics, settings(&shard), now);
        let changes = g.take_changes();
        let epoch = g.epoch();
        for change in &changes {
            membership::record(&mut c.member_changes, "consumer", &group_id, change);
        }
        let (response, moved) = outcome?;
        (response, moved.then_some(epoch))
    };
    if let Some(epoch) = epoch {
        shell::persist_consumer_epoch(&shard, &group_id, partition, epoch);
    }
    Ok(response)
}

/// ConsumerGroupDescribe of one group; GROUP_ID_NOT_FOUND for unknown and classic
/// groups (the admin client then falls back to DescribeGroups).
pub fn describe(shard: &Shard, partition: i32, group_id: &str) -> Result<DescribedConsumerGroup, Failure> {
    routing::check_coordinator(shard, partition).map_err(|code| (code, String::new()))?;
    let c = shard.coordinator.borrow();
    match c.groups.get(group_id) {
        Some(Group::Consumer(g)) => Ok(g.describe()),
        Some(Group::Classic(_)) => {
            Err((errors::GROUP_ID_NOT_FOUND, format!("Group {group_id} is not a consumer group.")))
        }
        None => Err((errors::GROUP_ID_NOT_FOUND, format!("Group {group_id} not found."))),
    }
}
