//! AlterUserScramCredentials (KIP-554): creates, replaces or deletes SCRAM credentials,
//! kept in the cluster metadata by the controller. The client sends the salt and the
//! salted password; the broker keeps only the keys derived from them.

use std::rc::Rc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::{AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse};

use crate::cluster::controller::{Failure, ScramChange};
use crate::cluster::requests::AlterScramCredentials;
use crate::errors;
use crate::security::context::RequestContext;
use crate::security::scram::{Credential, Mechanism, ITERATIONS_MAX, ITERATIONS_MIN};
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 0);

/// Relayed to the controller (see `handlers::run`) when the principal may do all it
/// asks: ALTER on the cluster.
pub fn relayed(shard: &Shard, ctx: &RequestContext, _req: &AlterUserScramCredentialsRequest) -> bool {
    super::cluster_allowed(shard, ctx, crate::security::acl::operation::ALTER)
}

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let mut users: Vec<String> = Vec::new();
    let mut keys: Vec<(String, i8)> = Vec::new();
    let mut changes: Vec<Result<ScramChange, Failure>> = Vec::new();
    for d in &req.deletions {
        users.push(d.name.to_string());
        keys.push((d.name.to_string(), d.mechanism));
        changes.push(check(&d.name, d.mechanism, None).map(|mechanism| ScramChange {
            user: d.name.to_string(),
            mechanism,
            credential: None,
        }));
    }
    for u in &req.upsertions {
        users.push(u.name.to_string());
        keys.push((u.name.to_string(), u.mechanism));
        changes.push(check(&u.name, u.mechanism, Some(u.iterations)).and_then(|mechanism| {
            if u.salt.is_empty() || u.salted_password.is_empty() {
                return Err((errors::UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty".into()));
            }
            let credential = Credential::from_salted(mechanism, &u.salt, &u.salted_password, u.iterations);
            Ok(ScramChange { user: u.name.to_string(), mechanism, credential: Some(credential) })
        }));
    }
    // As Kafka: ALTER on the cluster.
    if !super::cluster_authorized(shard, ctx, crate::security::acl::operation::ALTER) {
        for c in changes.iter_mut() {
            *c = Err((errors::CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.".into()));
        }
    }
    // As Kafka: a user and mechanism named twice in one request get DUPLICATE_RESOURCE
    // for each of their changes, and none of them is applied.
    for (i, key) in keys.iter().enumerate() {
        if keys.iter().filter(|k| *k == key).count() > 1 {
            changes[i] = Err((
                errors::DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request".into(),
            ));
        }
    }
    let valid: Vec<ScramChange> = changes.iter().filter_map(|c| c.as_ref().ok().cloned()).collect();
    let mut applied = shard.call(0, AlterScramCredentials { changes: valid }).await.into_iter();
    // One result per user, in request order; the first failure of a user wins.
    let mut results: Vec<AlterUserScramCredentialsResult> = Vec::new();
    for (user, change) in users.into_iter().zip(changes) {
        let outcome = change.and_then(|_| applied.next().expect("a result per valid change"));
        if let Some(existing) = results.iter_mut().find(|r| r.user.as_str() == user) {
            if existing.error_code == errors::NONE {
                if let Err((code, message)) = outcome {
                    existing.error_code = code;
                    existing.error_message = Some(str_bytes(&message));
                }
            }
            continue;
        }
        let mut r = AlterUserScramCredentialsResult::default().with_user(str_bytes(&user));
        if let Err((code, message)) = outcome {
            r.error_code = code;
            r.error_message = Some(str_bytes(&message));
        }
        results.push(r);
    }
    AlterUserScramCredentialsResponse::default().with_results(results)
}

fn check(user: &str, mechanism: i8, iterations: Option<i32>) -> Result<Mechanism, Failure> {
    if user.is_empty() {
        return Err((errors::UNACCEPTABLE_CREDENTIAL, "Username must not be empty".into()));
    }
    let mechanism = Mechanism::from_type(mechanism)
        .ok_or((errors::UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism".into()))?;
    match iterations {
        Some(i) if i < ITERATIONS_MIN => Err((errors::UNACCEPTABLE_CREDENTIAL, "Too few iterations".into())),
        Some(i) if i > ITERATIONS_MAX => Err((errors::UNACCEPTABLE_CREDENTIAL, "Too many iterations".into())),
        _ => Ok(mechanism),
    }
}
