//! Kafka's ACL model, as a pure core: bindings (a resource pattern and an access
//! control entry), the filters of DescribeAcls and DeleteAcls, and the decision of
//! StandardAuthorizer for one principal, host, operation and resource. No I/O and no
//! shard state: the bindings are read from the cluster metadata by the caller.
//!
//! The codes are Kafka's wire codes (`ResourceType`, `PatternType`, `AclOperation`,
//! `AclPermissionType`), kept as `i8` because that is what the requests carry, what
//! the metadata file stores and what the responses echo.

use serde::{Deserialize, Serialize};

/// `ResourceType` codes.
pub mod resource {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const TOPIC: i8 = 2;
    pub const GROUP: i8 = 3;
    pub const CLUSTER: i8 = 4;
    pub const TRANSACTIONAL_ID: i8 = 5;
    pub const DELEGATION_TOKEN: i8 = 6;
    pub const USER: i8 = 7;

    pub fn name(code: i8) -> &'static str {
        match code {
            ANY => "ANY",
            TOPIC => "TOPIC",
            GROUP => "GROUP",
            CLUSTER => "CLUSTER",
            TRANSACTIONAL_ID => "TRANSACTIONAL_ID",
            DELEGATION_TOKEN => "DELEGATION_TOKEN",
            USER => "USER",
            _ => "UNKNOWN",
        }
    }
}

/// `PatternType` codes.
pub mod pattern {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const MATCH: i8 = 2;
    pub const LITERAL: i8 = 3;
    pub const PREFIXED: i8 = 4;

    pub fn name(code: i8) -> &'static str {
        match code {
            ANY => "ANY",
            MATCH => "MATCH",
            LITERAL => "LITERAL",
            PREFIXED => "PREFIXED",
            _ => "UNKNOWN",
        }
    }
}

/// `AclOperation` codes.
pub mod operation {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const ALL: i8 = 2;
    pub const READ: i8 = 3;
    pub const WRITE: i8 = 4;
    pub const CREATE: i8 = 5;
    pub const DELETE: i8 = 6;
    pub const ALTER: i8 = 7;
    pub const DESCRIBE: i8 = 8;
    pub const CLUSTER_ACTION: i8 = 9;
    pub const DESCRIBE_CONFIGS: i8 = 10;
    pub const ALTER_CONFIGS: i8 = 11;
    pub const IDEMPOTENT_WRITE: i8 = 12;
    pub const CREATE_TOKENS: i8 = 13;
    pub const DESCRIBE_TOKENS: i8 = 14;
    pub const TWO_PHASE_COMMIT: i8 = 15;

    pub fn name(code: i8) -> &'static str {
        match code {
            ANY => "ANY",
            ALL => "ALL",
            READ => "READ",
            WRITE => "WRITE",
            CREATE => "CREATE",
            DELETE => "DELETE",
            ALTER => "ALTER",
            DESCRIBE => "DESCRIBE",
            CLUSTER_ACTION => "CLUSTER_ACTION",
            DESCRIBE_CONFIGS => "DESCRIBE_CONFIGS",
            ALTER_CONFIGS => "ALTER_CONFIGS",
            IDEMPOTENT_WRITE => "IDEMPOTENT_WRITE",
            CREATE_TOKENS => "CREATE_TOKENS",
            DESCRIBE_TOKENS => "DESCRIBE_TOKENS",
            TWO_PHASE_COMMIT => "TWO_PHASE_COMMIT",
            _ => "UNKNOWN",
        }
    }

    /// The operations of each resource type, as the authorized-operations bitfields
    /// of Metadata, DescribeCluster and DescribeGroups list them.
    pub fn of_resource(resource_type: i8) -> &'static [i8] {
        match resource_type {
            super::resource::TOPIC => &[READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS],
            super::resource::GROUP => &[READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS],
            super::resource::CLUSTER => {
                &[CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE]
            }
            super::resource::TRANSACTIONAL_ID => &[DESCRIBE, WRITE],
            _ => &[],
        }
    }
}

/// `AclPermissionType` codes.
pub mod permission {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const DENY: i8 = 2;
    pub const ALLOW: i8 = 3;

    pub fn name(code: i8) -> &'static str {
        match code {
            ANY => "ANY",
            DENY => "DENY",
            ALLOW => "ALLOW",
            _ => "UNKNOWN",
        }
    }
}

/// The name of the one CLUSTER resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The resource name and host that match every name and host.
pub const WILDCARD: &str = "*";

/// A code Kafka's `fromCode` maps to UNKNOWN: 0 and every code it does not know.
fn is_unknown(code: i8, last: i8) -> bool {
    code <= 0 || code > last
}

/// One ACL: a resource pattern and an access control entry, as Kafka's `AclBinding`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    /// `User:NAME`, `User:*`, or another `TYPE:NAME` Keel never authenticates.
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission: i8,
}

impl AclBinding {
    /// Whether a code is UNKNOWN itself (0): Kafka cannot parse such a request and
    /// closes the connection. Other codes it does not know are refused one by one.
    pub fn has_unknown(&self) -> bool {
        [self.resource_type, self.pattern_type, self.operation, self.permission].contains(&0)
    }

    /// Whether a code is a filter's (ANY, or MATCH): Kafka 4.4 answers a CreateAcls
    /// holding one UNKNOWN_SERVER_ERROR for every creation, without a message.
    pub fn has_filter_code(&self) -> bool {
        self.resource_type == resource::ANY
            || matches!(self.pattern_type, pattern::ANY | pattern::MATCH)
            || self.operation == operation::ANY
            || self.permission == permission::ANY
    }

    /// Kafka's checks of a new ACL (`AclApis.handleCreateAcls`, then the controller's
    /// `AclControlManager.validateNewAcl`), with their messages.
    pub fn validate(&self) -> Result<(), String> {
        if self.resource_type == resource::CLUSTER && self.resource_name != CLUSTER_NAME {
            return Err(format!("The only valid name for the CLUSTER resource is {CLUSTER_NAME}"));
        }
        if self.resource_name.is_empty() {
            return Err("Invalid empty resource name".into());
        }
        if matches!(self.resource_type, resource::UNKNOWN | resource::ANY)
            || is_unknown(self.resource_type, resource::USER)
        {
            return Err(format!("Invalid resourceType {}", resource::name(self.resource_type)));
        }
        if !matches!(self.pattern_type, pattern::LITERAL | pattern::PREFIXED) {
            return Err(format!("Invalid patternType {}", pattern::name(self.pattern_type)));
        }
        if matches!(self.operation, operation::UNKNOWN | operation::ANY)
            || is_unknown(self.operation, operation::TWO_PHASE_COMMIT)
        {
            return Err(format!("Invalid operation {}", operation::name(self.operation)));
        }
        if !matches!(self.permission, permission::ALLOW | permission::DENY) {
            return Err(format!("Invalid permissionType {}", permission::name(self.permission)));
        }
        if !self.principal.contains(':') {
            return Err(format!(
                "Could not parse principal from `{}` (no colon is present separating the principal type from the principal name)",
                self.principal
            ));
        }
        Ok(())
    }

    /// Whether this ACL's pattern covers the resource `name` of `resource_type`.
    fn covers(&self, resource_type: i8, name: &str) -> bool {
        if self.resource_type != resource_type {
            return false;
        }
        match self.pattern_type {
            pattern::LITERAL => self.resource_name == name || self.resource_name == WILDCARD,
            pattern::PREFIXED => name.starts_with(self.resource_name.as_str()),
            _ => false,
        }
    }
}

/// A filter of DescribeAcls and DeleteAcls, as Kafka's `AclBindingFilter`: `None`
/// and the ANY codes match everything.
#[derive(Debug, Clone)]
pub struct AclFilter {
    pub resource_type: i8,
    pub resource_name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission: i8,
}

impl AclFilter {
    /// Whether a code is UNKNOWN itself (0): the connection is closed, as Kafka does.
    pub fn has_unknown(&self) -> bool {
        [self.resource_type, self.pattern_type, self.operation, self.permission].contains(&0)
    }

    /// DeleteAcls' check of a filter (the controller's `validateFilter`): a code Kafka
    /// does not know is refused with its message. DescribeAcls has none: such a filter
    /// matches nothing.
    pub fn validate(&self) -> Result<(), &'static str> {
        if is_unknown(self.resource_type, resource::USER) || is_unknown(self.pattern_type, pattern::PREFIXED) {
            return Err("Unknown patternFilter.");
        }
        if is_unknown(self.operation, operation::TWO_PHASE_COMMIT) || is_unknown(self.permission, permission::ALLOW) {
            return Err("Unknown entryFilter.");
        }
        Ok(())
    }

    /// Kafka's `ResourcePatternFilter.matches` and `AccessControlEntryFilter.matches`.
    /// MATCH finds every pattern that covers the named resource: the literal name,
    /// the wildcard, and the prefixes of it.
    pub fn matches(&self, acl: &AclBinding) -> bool {
        self.matches_pattern(acl) && self.matches_entry(acl)
    }

    fn matches_pattern(&self, acl: &AclBinding) -> bool {
        if self.resource_type != resource::ANY && self.resource_type != acl.resource_type {
            return false;
        }
        if !matches!(self.pattern_type, pattern::ANY | pattern::MATCH) && self.pattern_type != acl.pattern_type {
            return false;
        }
        let Some(name) = &self.resource_name else { return true };
        if self.pattern_type == pattern::ANY || self.pattern_type == acl.pattern_type {
            return *name == acl.resource_name;
        }
        match acl.pattern_type {
            pattern::LITERAL => *name == acl.resource_name || acl.resource_name == WILDCARD,
            pattern::PREFIXED => name.starts_with(acl.resource_name.as_str()),
            _ => false,
        }
    }

    fn matches_entry(&self, acl: &AclBinding) -> bool {
        self.principal.as_ref().is_none_or(|p| *p == acl.principal)
            && self.host.as_ref().is_none_or(|h| *h == acl.host)
            && (self.operation == operation::ANY || self.operation == acl.operation)
            && (self.permission == permission::ANY || self.permission == acl.permission)
    }
}

/// The one question an authorizer answers.
#[derive(Debug, Clone, Copy)]
pub struct Action<'a> {
    pub operation: i8,
    pub resource_type: i8,
    pub resource_name: &'a str,
}

/// Who asks: the principal as `User:NAME` and the client's address.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    pub principal: &'a str,
    pub host: &'a str,
}

/// StandardAuthorizer's decision for one action, from every ACL of the cluster. A
/// DENY that matches wins; else an ALLOW of the operation, of ALL, or of an operation
/// that implies it (READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS
/// implies DESCRIBE_CONFIGS); with no ACL at all on the resource,
/// `allow_if_no_acl`.
pub fn decide(acls: &[AclBinding], who: Requester<'_>, action: Action<'_>, allow_if_no_acl: bool) -> bool {
    let mut any_on_resource = false;
    let mut allowed = false;
    for acl in acls.iter().filter(|a| a.covers(action.resource_type, action.resource_name)) {
        any_on_resource = true;
        let principal_matches = acl.principal == who.principal || acl.principal == "User:*";
        let host_matches = acl.host == WILDCARD || acl.host == who.host;
        if !principal_matches || !host_matches {
            continue;
        }
        match acl.permission {
            permission::DENY if acl.operation == action.operation || acl.operation == operation::ALL => {
                return false;
            }
            permission::ALLOW if grants(acl.operation, action.operation) => allowed = true,
            _ => {}
        }
    }
    allowed || (!any_on_resource && allow_if_no_acl)
}

/// Kafka's `authorizeByResourceType`: whether some resource of `resource_type` is
/// open to `who` for `operation`: an ALLOW pattern of the operation (or ALL) that no
/// DENY pattern covers (a literal DENY of the same name, a prefixed DENY of a prefix
/// of it, or a DENY of the wildcard).
pub fn decide_some(acls: &[AclBinding], who: Requester<'_>, wanted: i8, resource_type: i8) -> bool {
    let applies = |a: &&AclBinding| {
        a.resource_type == resource_type
            && (a.principal == who.principal || a.principal == "User:*")
            && (a.host == WILDCARD || a.host == who.host)
            && (a.operation == wanted || a.operation == operation::ALL)
    };
    let denies: Vec<&AclBinding> = acls.iter().filter(applies).filter(|a| a.permission == permission::DENY).collect();
    if denies.iter().any(|d| d.pattern_type == pattern::LITERAL && d.resource_name == WILDCARD) {
        return false;
    }
    let covered = |a: &AclBinding| {
        denies.iter().any(|d| match d.pattern_type {
            pattern::PREFIXED => a.resource_name.starts_with(d.resource_name.as_str()),
            _ => a.pattern_type == pattern::LITERAL && d.resource_name == a.resource_name,
        })
    };
    acls.iter().filter(applies).filter(|a| a.permission == permission::ALLOW).any(|a| !covered(a))
}

/// Whether an ALLOW of `granted` allows `wanted`.
fn grants(granted: i8, wanted: i8) -> bool {
    use operation::*;
    granted == wanted
        || granted == ALL
        || (wanted == DESCRIBE && matches!(granted, READ | WRITE | DELETE | ALTER))
        || (wanted == DESCRIBE_CONFIGS && granted == ALTER_CONFIGS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(rt: i8, name: &str, pt: i8, principal: &str, op: i8, perm: i8) -> AclBinding {
        AclBinding {
            resource_type: rt,
            resource_name: name.into(),
            pattern_type: pt,
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission: perm,
        }
    }

    const ALICE: Requester<'static> = Requester { principal: "User:alice", host: "127.0.0.1" };

    fn topic(op: i8, name: &str) -> Action<'_> {
        Action { operation: op, resource_type: resource::TOPIC, resource_name: name }
    }

    #[test]
    fn deny_wins_over_allow() {
        let acls = vec![
            acl(resource::TOPIC, "t", pattern::LITERAL, "User:alice", operation::ALL, permission::ALLOW),
            acl(resource::TOPIC, "t", pattern::LITERAL, "User:alice", operation::WRITE, permission::DENY),
        ];
        assert!(decide(&acls, ALICE, topic(operation::READ, "t"), false));
        assert!(!decide(&acls, ALICE, topic(operation::WRITE, "t"), false));
    }

    #[test]
    fn implied_operations() {
        let acls = vec![acl(resource::TOPIC, "t", pattern::LITERAL, "User:alice", operation::READ, permission::ALLOW)];
        assert!(decide(&acls, ALICE, topic(operation::DESCRIBE, "t"), false));
        assert!(!decide(&acls, ALICE, topic(operation::WRITE, "t"), false));
        let acls = vec![acl(
            resource::TOPIC,
            "t",
            pattern::LITERAL,
            "User:alice",
            operation::ALTER_CONFIGS,
            permission::ALLOW,
        )];
        assert!(decide(&acls, ALICE, topic(operation::DESCRIBE_CONFIGS, "t"), false));
        assert!(!decide(&acls, ALICE, topic(operation::DESCRIBE, "t"), false));
    }

    #[test]
    fn prefixed_and_wildcard_patterns() {
        let acls = vec![
            acl(resource::TOPIC, "orders-", pattern::PREFIXED, "User:alice", operation::READ, permission::ALLOW),
            acl(resource::TOPIC, "*", pattern::LITERAL, "User:*", operation::DESCRIBE, permission::ALLOW),
        ];
        assert!(decide(&acls, ALICE, topic(operation::READ, "orders-eu"), false));
        assert!(!decide(&acls, ALICE, topic(operation::READ, "order"), false));
        assert!(decide(&acls, ALICE, topic(operation::DESCRIBE, "anything"), false));
    }

    #[test]
    fn no_acl_found_follows_the_setting() {
        let acls =
            vec![acl(resource::TOPIC, "other", pattern::LITERAL, "User:bob", operation::READ, permission::ALLOW)];
        assert!(!decide(&acls, ALICE, topic(operation::READ, "t"), false));
        assert!(decide(&acls, ALICE, topic(operation::READ, "t"), true));
        // An ACL on the resource for someone else: no longer "no ACL found".
        assert!(!decide(&acls, ALICE, topic(operation::READ, "other"), true));
    }

    #[test]
    fn match_filter_finds_covering_patterns() {
        let literal = acl(resource::TOPIC, "orders-eu", pattern::LITERAL, "User:a", operation::READ, permission::ALLOW);
        let prefixed = acl(resource::TOPIC, "orders-", pattern::PREFIXED, "User:a", operation::READ, permission::ALLOW);
        let wildcard = acl(resource::TOPIC, "*", pattern::LITERAL, "User:a", operation::READ, permission::ALLOW);
        let filter = AclFilter {
            resource_type: resource::TOPIC,
            resource_name: Some("orders-eu".into()),
            pattern_type: pattern::MATCH,
            principal: None,
            host: None,
            operation: operation::ANY,
            permission: permission::ANY,
        };
        assert!(filter.matches(&literal) && filter.matches(&prefixed) && filter.matches(&wildcard));
        let any = AclFilter { pattern_type: pattern::ANY, ..filter.clone() };
        assert!(any.matches(&literal) && !any.matches(&prefixed) && !any.matches(&wildcard));
        let prefixed_only = AclFilter { pattern_type: pattern::PREFIXED, resource_name: None, ..filter };
        assert!(prefixed_only.matches(&prefixed) && !prefixed_only.matches(&literal));
    }

    #[test]
    fn validation_messages_are_kafkas() {
        let mut a = acl(resource::CLUSTER, "c", pattern::LITERAL, "User:a", operation::ALTER, permission::ALLOW);
        assert_eq!(a.validate().unwrap_err(), "The only valid name for the CLUSTER resource is kafka-cluster");
        a.resource_type = resource::ANY;
        assert_eq!(a.validate().unwrap_err(), "Invalid resourceType ANY");
        a.resource_type = resource::TOPIC;
        a.pattern_type = pattern::MATCH;
        assert_eq!(a.validate().unwrap_err(), "Invalid patternType MATCH");
        a.pattern_type = pattern::LITERAL;
        a.principal = "alice".into();
        assert!(a.validate().unwrap_err().starts_with("Could not parse principal"));
        a.principal = "User:alice".into();
        assert!(a.validate().is_ok());
        a.resource_type = 42;
        assert!(!a.has_unknown());
        assert_eq!(a.validate().unwrap_err(), "Invalid resourceType UNKNOWN");
        a.resource_type = 0;
        assert!(a.has_unknown());
    }
}
