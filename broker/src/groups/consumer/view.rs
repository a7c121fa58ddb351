//! What the rest of the broker reads from a consumer group: offset commit and fetch
//! checks, ConsumerGroupDescribe, and the classic DescribeGroups form.

use super::Assignment;

use super::ConsumerGroup;

use super::TopicLookup;
use crate::errors;
use crate::groups::classic::DescribedMember;
use crate::groups::consumer_protocol;

#[derive(Debug, Clone, Default)]
pub struct DescribedConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub assignment: Assignment,
    pub target_assignment: Assignment,
}

#[derive(Debug, Clone, Default)]
pub struct DescribedConsumerGroup {
    pub state: String,
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: Vec<DescribedConsumerMember>,
}

impl ConsumerGroup {
    /// Kafka's rules: outside group management (epoch < 0) only an empty group takes
    /// commits; a member commits at its current epoch, with OffsetCommit v9+.
    pub fn validate_offset_commit(&self, member_id: &str, epoch: i32, api_version: i16) -> Result<(), i16> {
        if epoch < 0 && self.members.is_empty() {
            return Ok(());
        }
        let m = self.members.get(member_id).ok_or(errors::UNKNOWN_MEMBER_ID)?;
        if api_version < 9 {
            return Err(errors::UNSUPPORTED_VERSION);
        }
        if epoch != m.epoch {
            return Err(errors::STALE_MEMBER_EPOCH);
        }
        Ok(())
    }

    /// OffsetFetch v9 from a member: it must be known and at its epoch.
    pub fn validate_offset_fetch(&self, member_id: &str, epoch: i32) -> Result<(), i16> {
        if epoch < 0 && member_id.is_empty() {
            return Ok(());
        }
        let m = self.members.get(member_id).ok_or(errors::UNKNOWN_MEMBER_ID)?;
        if epoch != m.epoch {
            return Err(errors::STALE_MEMBER_EPOCH);
        }
        Ok(())
    }

    pub fn describe(&self) -> DescribedConsumerGroup {
        DescribedConsumerGroup {
            state: self.state_name.to_string(),
            epoch: self.epoch,
            assignment_epoch: self.target_epoch,
            assignor: self.assignor.clone(),
            members: self
                .members
                .values()
                .map(|m| DescribedConsumerMember {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    member_epoch: m.epoch,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed_topic_names: m.subscribed.iter().cloned().collect(),
                    subscribed_topic_regex: m.regex.clone(),
                    assignment: m.assigned.clone(),
                    target_assignment: self.target.get(&m.id).cloned().unwrap_or_default(),
                })
                .collect(),
        }
    }

    /// The group as classic DescribeGroups shows it: the assignor as protocol, and
    /// members' subscriptions and assignments in the consumer embedded protocol.
    pub fn describe_classic(&self, topics: &impl TopicLookup) -> (String, Vec<DescribedMember>) {
        let members = self
            .members
            .values()
            .map(|m| {
                let assigned: Vec<(String, Vec<i32>)> = m
                    .assigned
                    .iter()
                    .filter_map(|(t, parts)| Some((topics.topic_name(t)?, parts.iter().copied().collect())))
                    .collect();
                let subscribed: Vec<String> = m.topics().into_iter().collect();
                DescribedMember {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: consumer_protocol::encode_subscription(&subscribed),
                    assignment: consumer_protocol::encode_assignment(&assigned),
                }
            })
            .collect();
        (self.assignor.clone(), members)
    }
}
